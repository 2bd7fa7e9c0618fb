"""Idempotent publish across producer processes on real ZooKeeper, Kafka and PostgreSQL
(issues 21 and 35: the ids in PostgreSQL, the membership in ZooKeeper).

Three ``python -m producer_api`` processes share a topic with ``dedupe_window``. The same
1 000 ids are published twice each: the second time half of them through another process
than the first, and some after a producer restart. 1 000 are stored, 1 000 delivered to the
endpoint, every second publish answered 200 ``"duplicate": true`` with the original's place.
Then 100 ids are each published through two processes at the same moment: each is stored
exactly once; and after a cutover to a new segment, the 1 000 ids published a third time are
still answered as duplicates, with their places in the first segment.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.app import create_app as create_control_plane
from control_plane.settings import ControlPlaneSettings
from core.model import Subscription
from reports import migrate
from tests.support.control_plane import app_client
from tests.support.processes import ProducerProcess, producer_processes
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import Running, World, kafka_world, subscribe

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.postgres]

ADMIN = "dedupe-admin-token-0123456789"
COUNT, RACED = 1_000, 100
PATH = "/v1/projects/p/topics/t/produce"


async def _cutover(world: World) -> str:
    """Move p/t's produce pointer to a new Kafka segment (the control plane's cutover, every
    producer taking part); the new segment's storage topic."""
    settings = ControlPlaneSettings(
        admin_token=ADMIN,
        metastore=world.zk,
        clusters={world.cluster: world.config},
        default_cluster=world.cluster,
        member_id="cp-dedupe",
    )
    app = create_control_plane(settings, stores=world.stores)
    async with app_client(app, token=ADMIN) as cp:
        where = "/v1/projects/p/topics/t/cutover"
        r = await cp.post(where, json={"cluster": world.cluster, "partitions": 2})
        assert r.status_code == 202, r.text

        async def done() -> dict[str, Any] | None:
            doc: dict[str, Any] = (await cp.get(where)).json()
            return doc if doc.get("phase") in {"COMPLETE", "ROLLED_BACK", "ABORTED"} else None

        doc = await until(done, 90, "the cutover to end")
        assert doc["phase"] == "COMPLETE", doc
    topic = await world.catalog.get_topic("p", "t")
    assert topic.active_segment is not None and topic.active_segment.id == 2
    return topic.active_segment.storage_topic


def _settings(world: World, member: str, database: str) -> dict[str, Any]:
    return {
        "admin_token": ADMIN,
        "metastore": world.zk.model_dump(),
        "clusters": {world.cluster: world.config.model_dump()},
        "member_id": member,
        "dedupe": {"kind": "postgres", "url": database},
    }


async def _stored(world: World) -> int:
    ends = await world.store.end_positions(world.storage)
    return sum(ends.values())


async def test_three_producers_store_each_id_once_and_answer_every_repeat_as_duplicate(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> None:
    migrate.upgrade(postgres_database)
    async with kafka_world(real_services, unique, partitions=4, grouped=False) as world:
        topic = await world.catalog.get_topic("p", "t")
        await world.catalog.update_topic(topic.model_copy(update={"dedupe_window": "10m"}))
        sub = await subscribe(world)  # from segment 1: it walks to segment 2 after the cutover
        settings = [_settings(world, f"dd{i}-{unique}", postgres_database) for i in range(3)]
        with producer_processes(settings, tmp_path) as procs:
            await _scenario(world, procs, sub)


async def _scenario(world: World, procs: list[ProducerProcess], sub: Subscription) -> None:
    ids = [f"order-{i:04d}" for i in range(COUNT)]
    limits = httpx.Limits(max_connections=32)
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(headers=headers, timeout=30, limits=limits) as client:
        gate = asyncio.Semaphore(24)

        async def publish(proc: ProducerProcess, mid: str, body: bytes) -> httpx.Response:
            async with gate:
                try:
                    return await client.post(
                        proc.url + PATH, content=body, headers={"X-Message-Id": mid}
                    )
                except (httpx.ReadError, httpx.RemoteProtocolError):
                    # A kept-alive connection the producer closed (idle past its keep-alive
                    # timeout, e.g. during the cutover) as the request went out (CI): sent
                    # again, as any client would; the message id makes it safe.
                    return await client.post(
                        proc.url + PATH, content=body, headers={"X-Message-Id": mid}
                    )

        async def round_of(picks: list[tuple[int, str]], body: bytes) -> list[httpx.Response]:
            return await asyncio.gather(*(publish(procs[p], mid, body) for p, mid in picks))

        t0 = time.monotonic()
        first = await round_of([(i % 3, mid) for i, mid in enumerate(ids)], b"first")
        first_s = time.monotonic() - t0
        assert Counter(r.status_code for r in first) == {201: COUNT}
        procs[0].stop()  # a restart between the rounds
        procs[0].start(timeout=60)
        # The second round: the first half through another process than the first time…
        half = COUNT // 2
        t0 = time.monotonic()
        second = await round_of([((i % 3 + 1) % 3, ids[i]) for i in range(half)], b"second")
        procs[1].stop()  # …a restart in the middle…
        procs[1].start(timeout=60)
        # …and the second half through the same process as the first time.
        second += await round_of([(i % 3, ids[i]) for i in range(half, COUNT)], b"second")
        second_s = time.monotonic() - t0

        assert Counter(r.status_code for r in second) == {200: COUNT}, Counter(
            r.text for r in second if r.status_code != 200
        )
        for one, two in zip(first, second, strict=True):
            assert two.json() == {**one.json(), "duplicate": True}
        stored = await _stored(world)
        assert stored == COUNT

        # Races: each id through two processes at the same moment; one stores it.
        raced = [f"race-{i:03d}" for i in range(RACED)]
        pairs = await asyncio.gather(
            *(round_of([(i % 3, mid), ((i + 1) % 3, mid)], b"race") for i, mid in enumerate(raced))
        )
        statuses = Counter(tuple(sorted(r.status_code for r in pair)) for pair in pairs)
        assert statuses == {(200, 201): RACED}, statuses
        for pair in pairs:
            a, b = (r.json() for r in pair)
            assert (a["segment"], a["partition"], a["position"]) == (
                b["segment"],
                b["partition"],
                b["position"],
            )
        assert await _stored(world) == COUNT + RACED

        # A cutover to a new segment: the ids are the topic's, not the segment's.
        new_storage = await _cutover(world)
        third = await round_of([((i + 2) % 3, mid) for i, mid in enumerate(ids)], b"third")
        assert [r.json() for r in third] == [{**r.json(), "duplicate": True} for r in first]
        assert sum((await world.store.end_positions(new_storage)).values()) == 0

    async with Running(world, sub) as runner:
        await until(
            lambda: runner.stats.delivered >= COUNT + RACED, 120, "every stored id delivered"
        )
    await world.store.delete_topic(new_storage)  # the servers are shared: leave nothing
    delivered = Counter(world.hook.delivered())
    assert delivered == Counter(ids + raced)  # each once
    print(
        f"\nfirst round: {COUNT} stored in {first_s:.2f} s; second round: {COUNT} answered "
        f"200 duplicate in {second_s:.2f} s (two producer restarts); stored {stored}; "
        f"races: {RACED} ids through two processes at once, {RACED} stored; after a "
        f"cutover to segment 2, {COUNT} answered duplicate again, none stored; delivered "
        f"{sum(delivered.values())} ({len(delivered)} distinct)"
    )

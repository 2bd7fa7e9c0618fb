"""One subscription of 4 shards over two worker processes, on real ZooKeeper and Kafka: both
workers deliver a share, a SIGKILLed worker's shards resume on the other, nothing is missing
and every group's messages first arrive in produce order."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from control_plane.assigner import Assigner, rendezvous
from core.model import (
    Backend,
    Endpoint,
    Project,
    Segment,
    SegmentState,
    Subscription,
    Topic,
)
from core.shards import shards, unit_key
from metastore import paths
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import KafkaClusterConfig
from segments.protocol import Record
from segments.registry import open_store
from tests.support.hook import SECRET
from tests.support.processes import WorkerProcess
from tests.support.services import RealServices

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SHARDS = 4
GROUPS = 40
TOTAL = 2_000
SESSION_S = 4.0


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, list[tuple[str, str]]]]:
    got: list[tuple[str, str]] = []  # (group, message id) in arrival order

    async def receive(request: web.Request) -> web.Response:
        got.append((request.headers["X-Group-Id"], request.headers["X-Message-Id"]))
        await asyncio.sleep(0.002)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hook", got
    finally:
        await runner.cleanup()


def _members_sharing(unique: str) -> list[str]:
    """Two member names between which rendezvous hashing splits the shards (with random
    names all four land on one worker one time in eight)."""
    keys = [unit_key("shop", "big", shard) for shard in shards(SHARDS)]
    for attempt in range(100):
        names = [f"w{i}-{unique}-{attempt}" for i in (1, 2)]
        if all(rendezvous(keys, names).values()):
            return names
    raise AssertionError("no split found")


async def _holders(meta: Any) -> dict[int, str]:
    out = {}
    for k in range(SHARDS):
        node = await meta.get(paths.subscription_lock("shop", "big", k))
        if node is not None:
            out[k] = json.loads(node.data)["member"]
    return out


async def test_shards_spread_over_workers_and_survive_a_sigkill(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    endpoint: tuple[str, list[tuple[str, str]]],
) -> None:
    url, got = endpoint
    zk = ZooKeeperConfig(
        hosts=real_services.zookeeper, root=f"/shards-{unique}", session_timeout_s=SESSION_S
    )
    kafka = KafkaClusterConfig(bootstrap_servers=real_services.kafka)
    settings = {
        "metastore": zk.model_dump(),
        "clusters": {"kafka-main": kafka.model_dump()},
        "commit_every_s": 0.2,
        "lock_retry_s": 0.2,
    }
    storage = f"it.{unique}.orders.s1"
    sent: dict[str, list[str]] = {f"g{i}": [] for i in range(GROUPS)}
    async with open_metastore(zk) as meta, open_store(kafka) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await store.create_topic(storage, 4, retention_ms=3_600_000)
        segment = Segment(
            id=1,
            cluster="kafka-main",
            backend=Backend.KAFKA,
            storage_topic=storage,
            partitions=4,
            state=SegmentState.ACTIVE,
        )
        await catalog.create_topic(Topic(project="shop", name="orders", grouped=True), segment)
        await catalog.create_subscription(
            Subscription(
                project="shop",
                name="big",
                topic_project="shop",
                topic="orders",
                endpoint=Endpoint(url=url),
                signing_secret=SECRET,
                max_in_flight=20,
                shards=SHARDS,
            )
        )
        workers = [WorkerProcess(settings, tmp_path, m) for m in _members_sharing(unique)]
        try:
            async with Assigner(meta, catalog, "cp-test", interval_s=0.5):
                await asyncio.gather(*(w.ready() for w in workers))
                async with asyncio.timeout(30):  # the plan once both have joined
                    while len(set((holders := await _holders(meta)).values())) < 2 or (
                        len(holders) < SHARDS
                    ):
                        await asyncio.sleep(0.1)
                spread = {
                    m: sorted(k for k, h in holders.items() if h == m) for m in holders.values()
                }
                victim = next(w for w in workers if w.member in holders.values())
                survivor = next(w for w in workers if w is not victim)

                async def produce() -> None:
                    for start in range(0, TOTAL, 100):
                        records = []
                        for i in range(start, start + 100):
                            group, mid = f"g{i % GROUPS}", f"m{i}"
                            sent[group].append(mid)
                            headers = (
                                ("x-message-id", mid.encode()),
                                ("x-group-id", group.encode()),
                            )
                            records.append(
                                Record(mid.encode(), key=group.encode(), headers=headers)
                            )
                        results = await store.produce_many(storage, records)
                        assert not [r for r in results if isinstance(r, Exception)]
                        await asyncio.sleep(0.1)

                producing = asyncio.create_task(produce())
                async with asyncio.timeout(90):
                    while len({m for _, m in got}) < TOTAL // 4:
                        await asyncio.sleep(0.02)
                victim.proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                async with asyncio.timeout(SESSION_S * 5):
                    while set((held := await _holders(meta)).values()) != {survivor.member} or (
                        len(held) < SHARDS
                    ):
                        await asyncio.sleep(0.05)
                takeover = time.monotonic() - killed_at
                await producing
                async with asyncio.timeout(90):
                    while len({m for _, m in got}) < TOTAL:
                        await asyncio.sleep(0.1)
        finally:
            for w in workers:
                w.stop()
            for child in await meta.children("/"):
                await meta.delete(f"/{child}", recursive=True)
            await store.delete_topic(storage)
    ids = [m for _, m in got]
    missing = {m for ms in sent.values() for m in ms} - set(ids)
    out_of_order = []
    for group, expected in sent.items():
        first_seen = list(dict.fromkeys(m for g, m in got if g == group))
        if first_seen != expected:
            out_of_order.append(group)
    print(
        f"\nshards per worker before the kill: {spread}; killed {victim.member}; "
        f"takeover {takeover:.2f}s; delivered={len(ids)} duplicates={len(ids) - len(set(ids))} "
        f"missing={len(missing)} groups out of order={out_of_order}"
    )
    assert len(spread) == 2, f"one worker held every shard: {spread}"
    assert not missing
    assert not out_of_order
    assert takeover < SESSION_S * 3

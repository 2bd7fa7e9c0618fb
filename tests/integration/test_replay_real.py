"""Replay from the archive into one subscription on real ZooKeeper, Kafka, Pulsar, PostgreSQL
and S3Proxy, with a real worker (issue 37 item 4): a topic archived to the bucket over three
hours of simulated time (hours 1 and 2 archived, hour 3 still only in storage; on Kafka the
storage retention expires hour 1 meanwhile), then ``sub replay`` of hours 1–3 to one
subscription: every message of the window delivered to it once, in group order, marked
``X-Replay: true``, none to the other subscription, and a replayed message's trace shows the
replay."""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from control_plane.leaders.archiver import Archiver
from control_plane.services.archive import load_state, objects_of
from core import envelope
from core.archive import HOUR_MS, ArchiveSpec, ArchiveStorage, iso
from metastore.config import ZooKeeperConfig, open_metastore
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from tests.support.control_plane import json_of
from tests.support.delivery import DeliveryWorld, clusters, delivery_world
from tests.support.leaders import leader_context
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import record

pytestmark = [
    pytest.mark.zookeeper,
    pytest.mark.kafka,
    pytest.mark.pulsar,
    pytest.mark.postgres,
    pytest.mark.s3,
]
SUBS = "/v1/projects/shop/subscriptions"
PER_HOUR = 20
GROUPS = 4
GRACE_S = 60.0
QUIET_S = 2.0  # how long nothing must arrive where nothing may (the only sleep here)


def _record(hour: int, i: int, at: int) -> Record:
    value = f"{hour}:{i}".encode()
    return record(f"h{hour}-m{i:03d}", f"g{i % GROUPS}", at=at, value=value)


def _storage(real: RealServices) -> dict[str, Any]:
    assert real.s3, "the services file names no S3 server: scripts.realservices starts s3proxy"
    return {
        "s3_endpoint": real.s3,
        "s3_access_key_id": real.s3_access_key_id,
        "s3_secret_access_key": real.s3_secret_access_key,
        "s3_buckets": [real.s3_bucket],
        "grace_s": GRACE_S,
        "interval_s": 3_600,  # the app's archiver runs once at start; the test drives rounds
    }


async def _expire_before(real: RealServices, store: SegmentStore, name: str, at: int) -> None:
    """Kafka's retention, now: every record older than ``at`` deleted (the log start moves)."""
    parts = await store.partitions(name) or 0
    starts = [TopicPartition(name, p, await store.position_at(name, p, at)) for p in range(parts)]
    admin = AdminClient({"bootstrap.servers": real.kafka})
    for future in admin.delete_records(starts).values():
        await asyncio.to_thread(future.result, 30)


async def _status(world: DeliveryWorld, sub: str) -> dict[str, Any]:
    return json_of(await world.cp.get(f"{SUBS}/{sub}/replay"))


async def _replayed_trace(world: DeliveryWorld, mid: str) -> dict[str, Any] | None:
    r = await world.cp.get(f"/v1/projects/shop/topics/orders/messages/{mid}")
    if r.status_code != 200:
        return None
    subs = {s["subscription"]: [e["type"] for e in s["events"]] for s in r.json()["subscriptions"]}
    events = subs.get("shop/mailer", [])
    return r.json() if events[-3:] == ["replayed", "attempted", "delivered"] else None


async def _events(world: DeliveryWorld, mid: str) -> list[str] | None:
    """mailer's events of ``mid`` once its last is an outcome."""
    r = await world.cp.get(f"/v1/projects/shop/topics/orders/messages/{mid}")
    if r.status_code != 200:
        return None
    subs = {s["subscription"]: [e["type"] for e in s["events"]] for s in r.json()["subscriptions"]}
    events = subs.get("shop/mailer", [])
    return events if events and events[-1] in ("filtered", "delivered") else None


@pytest.mark.parametrize("cluster", ["kafka-main", "pulsar-main"])
async def test_replay_of_three_archived_hours_reaches_one_subscription_once_in_group_order(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    postgres_database: str,
    cluster: str,
) -> None:
    now = int(time.time() * 1000)
    h1 = now - now % HOUR_MS - 6 * HOUR_MS
    hours = [h1, h1 + HOUR_MS, h1 + 2 * HOUR_MS]
    records = [
        _record(n, i, at + 1_000 + i * 1_000) for n, at in enumerate(hours) for i in range(PER_HOUR)
    ]
    settings = _storage(real_services)
    bucket = real_services.s3_bucket
    async with delivery_world(
        real_services,
        unique,
        tmp_path,
        cluster,
        database_url=postgres_database,
        cp_settings={"archive": settings},
    ) as world:
        spec = {"to": f"s3://{bucket}/replay/{unique}"}
        topic = await world.topic("orders", partitions=2, grouped=True, archive=spec)
        name = topic["segments"][0]["storage_topic"]
        zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/delivery-{unique}")
        async with (
            open_metastore(zk) as meta,
            open_store(clusters(real_services)[cluster]) as store,
        ):
            # Three hours of messages accepted in the past, before the subscriptions exist
            # (they start at the latest position: only a replay brings them these).
            done = await store.produce_many(name, records)
            assert not [r for r in done if isinstance(r, Exception)]
            storage = ArchiveStorage.model_validate(settings)
            clock = [0]
            context = leader_context(meta, {cluster: store}, f"t-{unique}")
            archiver = Archiver(context, storage, now_ms=lambda: clock[0])
            for archived in (1, 2):  # hours 1 and 2 close and are archived; hour 3 is not yet
                clock[0] = hours[archived - 1] + HOUR_MS + int(GRACE_S * 1000)
                await archiver.round()
            objects = objects_of(storage, ArchiveSpec.model_validate(spec))
            state = await load_state(objects)
            assert [w.start_ms for w in state.windows] == hours[:2]
            if cluster == "kafka-main":  # storage retention takes hour 1 away from Kafka
                await _expire_before(real_services, store, name, hours[1])

        # mailer's filter leaves group g3 out: a replay goes through it
        await world.subscribe("mailer", "orders", filter='headers["x-group-id"] != "g3"')
        await world.subscribe("ledger", "orders")
        for sub in ("mailer", "ledger"):
            await world.running(sub)

        body = {"since": iso(hours[0]), "until": iso(hours[2] + HOUR_MS), "rate": 1_000}
        r = await world.cp.post(f"{SUBS}/mailer/replay", json=body)
        assert r.status_code == 202, r.text
        again = await world.cp.post(f"{SUBS}/mailer/replay", json=body)
        assert again.status_code == 409 or (await _status(world, "mailer"))["state"] == "done"

        async def finished() -> dict[str, Any] | None:
            found = await _status(world, "mailer")
            return found if found["state"] in ("done", "failed") else None

        replay = await until(finished, 60, "the replay written")
        assert replay["state"] == "done", replay
        total = 3 * PER_HOUR
        assert replay["total"] == replay["written"] == total
        assert (replay["from_archive"], replay["from_storage"]) == (2 * PER_HOUR, PER_HOUR)
        hook = world.hook
        wanted = sorted(
            envelope.header(r.headers, envelope.MESSAGE_ID) or ""
            for r in records
            if r.key != f"g{GROUPS - 1}".encode()
        )
        await until(lambda: len(hook.ids("mailer")) >= len(wanted), 60, "the window at mailer")
        trace = await until(lambda: _replayed_trace(world, "h0-m000"), 30, "the trace")
        await asyncio.sleep(QUIET_S)  # ledger must see nothing; mailer nothing twice

        got = hook.on("mailer")
        ids = [d.id for d in got]
        assert sorted(ids) == wanted and len(ids) == len(set(ids))
        assert all(d.headers.get("X-Replay") == "true" for d in got)
        by_group: dict[str, list[str]] = defaultdict(list)
        for d in got:
            by_group[d.headers["X-Group-Id"]].append(d.id)
        for group, seen in by_group.items():  # per group: accepted order, hour by hour
            assert seen == sorted(seen), (group, seen)
        assert hook.ids("ledger") == []
        assert hook.bad_signatures == 0
        assert trace is not None
        left_out = await until(lambda: _events(world, "h0-m003"), 30, "the filtered one's trace")
        assert left_out[-2:] == ["replayed", "filtered"]

"""The archive on real ZooKeeper, Kafka, Pulsar and an S3-compatible server (S3Proxy): a topic
archived to a bucket over three hours of simulated time (records written with accept times in
the past, the archiver's clock injected), Kafka's retention expiring the oldest hour from
storage meanwhile; every message lies in the file of its hour once, byte for byte, and the
archive keeps the hour storage no longer holds."""

from __future__ import annotations

import asyncio
import time

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from control_plane.leaders.archiver import Archiver
from control_plane.services.archive import load_state, objects_of, read_window
from core import envelope
from core.archive import HOUR_MS, ArchiveSpec, ArchiveStorage
from core.model import Project, Topic
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import ClusterConfig, KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from tests.support.leaders import leader_context
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import record, segment

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.pulsar, pytest.mark.s3]
PER_HOUR = 30
GROUPS = 4
GRACE_S = 60.0


def _record(hour: int, i: int, at: int) -> Record:
    binary = {"x-binary": bytes([i, 0, 13])}
    value = bytes([hour, i]) + b"#"
    return record(f"h{hour}-m{i:03d}", f"g{i % GROUPS}", at=at, value=value, **binary)


def storage(real: RealServices) -> ArchiveStorage:
    assert real.s3, "the services file names no S3 server: scripts.realservices starts s3proxy"
    return ArchiveStorage(
        s3_endpoint=real.s3,
        s3_access_key_id=real.s3_access_key_id,
        s3_secret_access_key=real.s3_secret_access_key,  # type: ignore[arg-type]
        s3_buckets=[real.s3_bucket],
        grace_s=GRACE_S,
    )


def _cluster(real: RealServices, backend: str) -> ClusterConfig:
    if backend == "kafka":
        return KafkaClusterConfig(bootstrap_servers=real.kafka)
    return PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin)


async def _expire_before(real: RealServices, store: SegmentStore, name: str, at: int) -> None:
    """Kafka's retention, now: every record older than ``at`` deleted (the log start moves)."""
    starts = [TopicPartition(name, p, await store.position_at(name, p, at)) for p in range(2)]
    admin = AdminClient({"bootstrap.servers": real.kafka})
    for future in admin.delete_records(starts).values():
        await asyncio.to_thread(future.result, 30)


def _log_start(real: RealServices, name: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": real.kafka, "group.id": "archive-test"})
    try:
        low, _ = consumer.get_watermark_offsets(TopicPartition(name, partition), timeout=10)
        return int(low)
    finally:
        consumer.close()


@pytest.mark.parametrize("backend", ["kafka", "pulsar"])
async def test_three_hours_archived_to_s3_once_each_beyond_storage_retention(
    real_services: RealServices, unique: str, backend: str
) -> None:
    now = int(time.time() * 1000)
    h1 = now - now % HOUR_MS - 6 * HOUR_MS  # three closed hours, well in the past
    hours = [h1, h1 + HOUR_MS, h1 + 2 * HOUR_MS]
    records = {
        n: [_record(n, i, start + 1_000 + i * 1_000) for i in range(PER_HOUR)]
        for n, start in enumerate(hours)
    }
    cluster = f"{backend}-main"
    seg = segment(cluster, storage=f"it.{unique}.archive", partitions=2)
    zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/archive-{unique}")
    settings = storage(real_services)
    spec = ArchiveSpec(to=f"s3://{real_services.s3_bucket}/{backend}/{unique}")
    clock = [hours[0] + HOUR_MS + int(GRACE_S * 1000)]  # the first hour has just closed
    async with open_metastore(zk) as meta, open_store(_cluster(real_services, backend)) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await store.create_topic(seg.storage_topic, 2, retention_ms=30 * 24 * HOUR_MS)
        await catalog.create_topic(Topic(project="shop", name="orders", archive=spec), seg)
        for n in range(3):
            done = await store.produce_many(seg.storage_topic, records[n])
            assert not [r for r in done if isinstance(r, Exception)]

        context = leader_context(meta, {cluster: store}, f"cp-{unique}")
        archiver = Archiver(context, settings, now_ms=lambda: clock[0])
        objects = objects_of(settings, spec)

        async def windows() -> list[int]:
            return [w.start_ms for w in (await load_state(objects)).windows]

        async with archiver:  # elected through ZooKeeper; its first round runs at once
            await until(lambda: archiver.rounds >= 1, 30, "the archiver's first round")
            assert await windows() == hours[:1]  # hours 2 and 3 are not closed yet
            if backend == "kafka":  # storage retention takes hour 1 away from Kafka
                await _expire_before(real_services, store, seg.storage_topic, hours[1])
            clock[0] = hours[2] + HOUR_MS + int(GRACE_S * 1000)
            await archiver.round()
            assert await windows() == hours

            state = await load_state(objects)
            for n, window in enumerate(state.windows):
                rows = await read_window(objects, window)
                assert window.messages == PER_HOUR == len(rows) and window.duplicates == 0
                got = {r["id"]: r for r in rows}
                for record in records[n]:
                    row = got[envelope.header(record.headers, envelope.MESSAGE_ID) or ""]
                    assert row["payload"] == record.value
                    assert [(h["name"], h["value"]) for h in row["headers"]] == list(record.headers)
                    assert row["produced_at"] == record.timestamp_ms
                # in each partition, positions ascend: the group order of storage
                for p in (0, 1):
                    positions = [r["position"] for r in rows if r["partition"] == p]
                    assert positions == sorted(positions)
            if backend == "kafka":  # the archive holds what storage no longer does
                name = seg.storage_topic
                lows = [await asyncio.to_thread(_log_start, real_services, name, p) for p in (0, 1)]
                assert sum(lows) == PER_HOUR  # every message of hour 1 is gone from Kafka

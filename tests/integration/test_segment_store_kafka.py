"""The Kafka backend meets the segment store contract on the real broker, and its fence holds.

Beyond the shared contract: the fence refuses a plain confluent-kafka idempotent producer
opened before the seal, no write racing the seal is acknowledged at or past the returned ends,
the seal's probes never land in the segment, a read from a position retention removed starts
at the oldest message left, and a dead broker fails calls within the produce timeout.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from core.errors import NotFound, SegmentFenced, StorageUnavailable
from segments.config import KafkaClusterConfig
from segments.kafka import KafkaSegmentStore, create_store
from segments.protocol import Produced, Record
from segments.registry import open_store
from tests.contract.segment_store_contract import RETENTION_MS, SegmentStoreContract
from tests.support.services import RealServices

pytestmark = pytest.mark.kafka

PRODUCE_TIMEOUT_S = 5.0


def _config(bootstrap: str, timeout: float = PRODUCE_TIMEOUT_S) -> KafkaClusterConfig:
    return KafkaClusterConfig(bootstrap_servers=bootstrap, produce_timeout_s=timeout)


@pytest.fixture
async def store(real_services: RealServices) -> AsyncIterator[KafkaSegmentStore]:
    async with create_store(_config(real_services.kafka)) as opened:
        yield opened


@pytest.fixture
async def other_store(real_services: RealServices) -> AsyncIterator[KafkaSegmentStore]:
    async with create_store(_config(real_services.kafka)) as opened:
        yield opened


def _name() -> str:
    return f"httpbus.kafka-test.t{uuid.uuid4().hex[:10]}.s1"


class TestKafkaSegmentStore(SegmentStoreContract):
    pass


def test_the_registry_opens_the_kafka_backend(real_services: RealServices) -> None:
    assert isinstance(open_store(_config(real_services.kafka)), KafkaSegmentStore)


async def test_the_fence_refuses_a_plain_idempotent_producer_opened_before(
    store: KafkaSegmentStore, real_services: RealServices
) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    raw = Producer(
        {"bootstrap.servers": real_services.kafka, "acks": "all", "enable.idempotence": True}
    )
    reports: list[KafkaError | None] = []
    raw.produce(name, b"before", partition=0, on_delivery=lambda e, m: reports.append(e))
    assert await asyncio.to_thread(raw.flush, 30) == 0 and reports == [None]
    ends = await store.seal(name)
    raw.produce(name, b"after", partition=0, on_delivery=lambda e, m: reports.append(e))
    assert await asyncio.to_thread(raw.flush, 30) == 0
    late = reports[1]
    assert late is not None and late.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert await store.end_positions(name) == ends == {0: 1}
    raw.close()


async def test_no_write_racing_the_seal_is_acknowledged_past_the_ends(
    store: KafkaSegmentStore, other_store: KafkaSegmentStore
) -> None:
    name = _name()
    await store.create_topic(name, 2, retention_ms=RETENTION_MS)
    acked: list[Produced] = []
    refused: list[Exception] = []
    sealed = asyncio.Event()

    async def writer(key: bytes) -> None:
        # Keeps writing through the seal and a while after it.
        deadline = None
        while deadline is None or time.monotonic() < deadline:
            if sealed.is_set() and deadline is None:
                deadline = time.monotonic() + 1.0
            for result in await other_store.produce_many(name, [Record(b"w", key=key)] * 5):
                (acked if isinstance(result, Produced) else refused).append(result)  # type: ignore[arg-type]
            await asyncio.sleep(0.01)

    writers = [asyncio.create_task(writer(f"k{i}".encode())) for i in range(4)]
    await asyncio.sleep(0.5)
    ends = await store.seal(name)
    sealed.set()
    await asyncio.gather(*writers)
    assert acked and refused
    assert all(isinstance(e, SegmentFenced) for e in refused)
    assert all(p.position < ends[p.partition] for p in acked)
    assert await store.end_positions(name) == ends
    for partition, end in ends.items():
        mine = sorted(p.position for p in acked if p.partition == partition)
        assert mine == list(range(end))  # every acked message is stored, nothing else


async def test_the_seal_probes_are_never_stored(store: KafkaSegmentStore) -> None:
    name = _name()
    await store.create_topic(name, 3, retention_ms=RETENTION_MS)
    await store.produce(name, Record(b"only"), partition=2)
    ends = await store.seal(name)
    assert ends == {0: 0, 1: 0, 2: 1}
    assert await store.read(name, 0, 0, timeout=0.5) == []
    [only] = await store.read(name, 2, 0, timeout=10)
    assert only.value == b"only"


async def test_sealing_a_missing_topic_is_not_found(store: KafkaSegmentStore) -> None:
    with pytest.raises(NotFound):
        await store.seal(_name())


async def test_a_dead_broker_fails_within_the_produce_timeout() -> None:
    timeout = 2.0
    async with create_store(_config("127.0.0.1:1", timeout)) as dead:
        t0 = time.monotonic()
        with pytest.raises(StorageUnavailable):
            await dead.create_topic(_name(), 1, retention_ms=RETENTION_MS)
        assert time.monotonic() - t0 < timeout + 0.5
        t0 = time.monotonic()
        with pytest.raises(StorageUnavailable):
            await dead.produce(_name(), Record(b"x"))
        assert time.monotonic() - t0 < timeout + 0.5


async def test_a_read_from_an_expired_position_starts_at_the_oldest_left(
    store: KafkaSegmentStore, real_services: RealServices
) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    produced = [await store.produce(name, Record(f"{i}".encode())) for i in range(5)]
    admin = AdminClient({"bootstrap.servers": real_services.kafka})
    [deleted] = admin.delete_records([TopicPartition(name, 0, produced[3].position)]).values()
    await asyncio.to_thread(deleted.result, 30)
    back = await store.read(name, 0, produced[0].position, timeout=10)
    assert [m.value for m in back] == [b"3", b"4"]
    assert await store.read(name, 0, produced[-1].position + 5, timeout=0.2) == []

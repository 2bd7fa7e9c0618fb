"""The audit sink on the real Kafka broker: it creates the audit topic, writes every emitted
event exactly as ``to_bytes`` made it, keyed by message id (one partition per message, in emit
order), and ``aclose`` writes what is still pending.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence

import pytest

from httpbus.core.audit import AuditEvent, AuditType
from httpbus.segments.audit import AuditSink
from httpbus.segments.config import KafkaClusterConfig
from httpbus.segments.protocol import SegmentStore, Stored, partition_for
from httpbus.segments.registry import open_store
from tests.conftest import RealServices

pytestmark = pytest.mark.kafka

TYPES = list(AuditType)


@pytest.fixture
async def store(real_services: RealServices) -> AsyncIterator[SegmentStore]:
    config = KafkaClusterConfig(bootstrap_servers=real_services.kafka, produce_timeout_s=5)
    async with open_store(config) as opened:
        yield opened


@pytest.fixture
async def topic(store: SegmentStore, unique: str) -> AsyncIterator[str]:
    name = f"httpbus.audit-test.{unique}"
    yield name
    if await store.partitions(name) is not None:
        await store.delete_topic(name)


def _event(i: int) -> AuditEvent:
    return AuditEvent(
        type=TYPES[i % len(TYPES)],
        message_id=f"msg-{i % 250}",
        project="shop",
        topic="orders",
        subscription="billing",
        position=i,
        at_ms=1_700_000_000_000 + i,
        status=200 if i % 3 else 503,
        error="é\x00" if i % 11 == 0 else None,
    )


async def _read_all(store: SegmentStore, topic: str) -> list[Stored]:
    out: list[Stored] = []
    for partition, end in sorted((await store.end_positions(topic)).items()):
        start = 0
        while start < end:
            got = await store.read(topic, partition, start, max_records=2_000, timeout=5.0)
            assert got, f"partition {partition} ends at {end} but nothing read from {start}"
            out.extend(got)
            start = got[-1].position + 1
    return out


def _by_message(events: Sequence[AuditEvent]) -> dict[str, list[AuditEvent]]:
    out: dict[str, list[AuditEvent]] = defaultdict(list)
    for event in events:
        out[event.message_id].append(event)
    return out


async def test_every_event_reaches_kafka_byte_identical(store: SegmentStore, topic: str) -> None:
    events = [_event(i) for i in range(5_000)]
    async with AuditSink(store, topic, partitions=4, flush_interval_s=0.05) as sink:
        for event in events:
            sink.emit(event)
        async with asyncio.timeout(30):  # the background task alone writes them
            while sink.written < len(events):
                assert sink.failed_batches == 0
                await asyncio.sleep(0.05)
        assert (sink.emitted, sink.dropped, sink.pending) == (5_000, 0, 0)
    assert await store.partitions(topic) == 4
    back = await _read_all(store, topic)
    assert len(back) == 5_000
    assert sorted(r.value for r in back) == sorted(e.to_bytes() for e in events)
    for record in back:
        assert record.headers == (("v", b"1"),)
        assert record.key == AuditEvent.from_bytes(record.value).message_id.encode()
        assert record.partition == partition_for(record.key, 4)
    read_events = [AuditEvent.from_bytes(r.value) for r in back]
    assert _by_message(read_events) == _by_message(events)  # emit order per message id


async def test_aclose_flushes_to_kafka_and_the_topic_is_reused(
    store: SegmentStore, topic: str
) -> None:
    first = AuditSink(store, topic, partitions=2, flush_interval_s=60)  # only aclose writes
    await first.start()
    for i in range(300):
        first.emit(_event(i))
    assert first.written == 0
    await first.aclose()
    assert (first.written, first.pending) == (300, 0)
    first.emit(_event(0))
    assert first.dropped == 1
    async with AuditSink(store, topic, partitions=8) as second:  # AlreadyExists is fine
        second.emit(_event(300))
    assert second.written == 1
    assert await store.partitions(topic) == 2
    back = await _read_all(store, topic)
    assert sorted(r.value for r in back) == sorted(_event(i).to_bytes() for i in range(301))

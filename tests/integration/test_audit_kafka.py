"""The audit sink on the real Kafka broker: it creates the audit topic, writes every emitted
event exactly as ``to_bytes`` made it, packed many per record (no key, spread over the
partitions) within the size bound Kafka's 1 MiB limit needs, drops an event Kafka refuses as
too large without blocking the others, and ``aclose`` writes what is still pending.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from core.audit import AuditEvent
from segments.audit import AuditSink, decode_audit_record
from segments.config import KafkaClusterConfig
from segments.protocol import SegmentStore, Stored
from segments.registry import open_store
from tests.support.audit_sink import nth_event
from tests.support.services import RealServices
from tests.support.stored import read_to_end
from tests.support.until import until

pytestmark = pytest.mark.kafka

KIB = 1024


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


async def _read_all(store: SegmentStore, topic: str) -> list[Stored]:
    return await read_to_end(store, topic, max_records=2_000)


def _lines(records: Sequence[Stored]) -> list[bytes]:
    return sorted(line for record in records for line in record.value.split(b"\n"))


def _sorted_bytes(events: Sequence[AuditEvent]) -> list[bytes]:
    return sorted(event.to_bytes() for event in events)


async def test_every_event_reaches_kafka_byte_identical(store: SegmentStore, topic: str) -> None:
    events = [nth_event(i) for i in range(5_000)]
    async with AuditSink(store, topic, partitions=4, flush_interval_s=0.05) as sink:
        for event in events:
            sink.emit(event)

        def written() -> bool:  # the background task alone writes them
            assert sink.failed_batches == 0
            return sink.written >= len(events)

        await until(written, 30, "every event written", interval=0.05)
        assert (sink.emitted, sink.dropped, sink.pending) == (5_000, 0, 0)
    assert await store.partitions(topic) == 4
    back = await _read_all(store, topic)
    assert len(back) == 10  # batches of 1 000 events, 500 per record
    assert _lines(back) == _sorted_bytes(events)  # byte identical, none lost, none twice
    for record in back:
        assert record.key is None
        assert record.headers == (("v", b"1"), ("n", b"500"))
    assert {r.partition for r in back} == {0, 1, 2, 3}  # spread round-robin
    decoded = sorted((e for r in back for e in decode_audit_record(r.value)), key=lambda e: e.at_ms)
    assert decoded == events  # ordered by at_ms, the trail is what was emitted


async def test_large_events_fit_kafka_and_one_too_large_is_dropped_alone(
    store: SegmentStore, topic: str
) -> None:
    sizes = [(i * 7919) % (60 * KIB) + 1 for i in range(120)]  # up to 60 KiB of error each
    sizes[7] = 1_200 * KIB  # beyond Kafka's default 1 MiB message size: refused, TooLarge
    events = [nth_event(i, error="z" * size) for i, size in enumerate(sizes)]
    async with AuditSink(store, topic, partitions=2, flush_interval_s=60) as sink:
        for event in events:
            sink.emit(event)
        for _ in range(6):  # the refused record is tried five times, then dropped
            await sink.flush()
        assert (sink.written, sink.dropped, sink.pending) == (119, 1, 0)
    back = await _read_all(store, topic)
    assert max(len(r.value) for r in back) <= 512 * KIB
    assert len(back) < 120 // 4  # packed: about 3.5 MiB in records of up to 512 KiB
    assert _lines(back) == _sorted_bytes(events[:7] + events[8:])


async def test_aclose_flushes_to_kafka_and_the_topic_is_reused(
    store: SegmentStore, topic: str
) -> None:
    first = AuditSink(store, topic, partitions=2, flush_interval_s=60)  # only aclose writes
    await first.start()
    for i in range(300):
        first.emit(nth_event(i))
    assert first.written == 0
    await first.aclose()
    assert (first.written, first.pending) == (300, 0)
    first.emit(nth_event(0))
    assert first.dropped == 1
    async with AuditSink(store, topic, partitions=8) as second:  # AlreadyExists is fine
        second.emit(nth_event(300))
    assert second.written == 1
    assert await store.partitions(topic) == 2
    back = await _read_all(store, topic)
    assert _lines(back) == _sorted_bytes([nth_event(i) for i in range(301)])

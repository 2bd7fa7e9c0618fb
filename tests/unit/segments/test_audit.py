"""The audit sink on the embedded store: everything emitted is written and read back byte for
byte, ``emit`` never waits (a full buffer drops and counts), a failing store loses nothing once
it recovers and keeps the order per message id, retries back off on the injected clock, and
``aclose`` writes what is pending.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from httpbus.core.audit import AuditEvent, AuditType
from httpbus.core.errors import StorageUnavailable, TooLarge
from httpbus.segments.audit import AuditSink, audit_record
from httpbus.segments.embedded import EmbeddedSegmentStore, EmbeddedSettings
from httpbus.segments.protocol import Produced, Record, SegmentStore, Stored, partition_for

TOPIC = "__httpbus.audit"
TYPES = list(AuditType)


def _event(i: int, messages: int = 100) -> AuditEvent:
    """The i-th event: 100 messages, each with a run of events of every type."""
    return AuditEvent(
        type=TYPES[i % len(TYPES)],
        message_id=f"msg-{i % messages}",
        project="shop",
        topic="orders",
        subscription="billing",
        segment=3,
        partition=i % 4,
        position=i,
        at_ms=1_700_000_000_000 + i,
        attempt=i,
        error="boom ✓" if i % 7 == 0 else None,
    )


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


class FlakyStore:
    """The embedded store, but ``produce_many`` fails as the test says (a fake *around* it)."""

    def __init__(self, inner: SegmentStore, whole_failures: int = 0) -> None:
        self.inner = inner
        self.whole_failures = whole_failures  # calls that raise StorageUnavailable
        self.failing_keys: dict[bytes, Exception] = {}  # records that fail one by one
        self.calls = 0
        self.stuck: asyncio.Event | None = None  # set: produce_many hangs until it is set

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        self.calls += 1
        if self.stuck is not None:
            await self.stuck.wait()
        if self.calls <= self.whole_failures:
            raise StorageUnavailable("audit test: storage down")
        passing = [r for r in records if r.key not in self.failing_keys]
        written = iter(await self.inner.produce_many(name, passing))
        return [
            self.failing_keys[r.key] if r.key in self.failing_keys else next(written)
            for r in records
        ]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedSegmentStore]:
    settings = EmbeddedSettings(path=tmp_path / "audit.db", produce_timeout_s=5.0)
    async with EmbeddedSegmentStore(settings) as opened:
        yield opened


async def _read_all(store: SegmentStore, topic: str = TOPIC) -> list[Stored]:
    """Every record of the topic, partition by partition, each in stored order."""
    out: list[Stored] = []
    for partition, end in sorted((await store.end_positions(topic)).items()):
        start = 0
        while start < end:
            got = await store.read(topic, partition, start, max_records=1000, timeout=1.0)
            assert got, f"partition {partition} ends at {end} but nothing read from {start}"
            out.extend(got)
            start = got[-1].position + 1
    return out


def _by_message(records: Sequence[Stored]) -> dict[str, list[AuditEvent]]:
    events: dict[str, list[AuditEvent]] = defaultdict(list)
    for record in records:
        event = AuditEvent.from_bytes(record.value)
        events[event.message_id].append(event)
    return events


def _emitted_by_message(events: Sequence[AuditEvent]) -> dict[str, list[AuditEvent]]:
    out: dict[str, list[AuditEvent]] = defaultdict(list)
    for event in events:
        out[event.message_id].append(event)
    return out


async def test_every_event_is_written_and_read_back_byte_identical(
    store: EmbeddedSegmentStore,
) -> None:
    events = [_event(i) for i in range(5_000)]
    async with AuditSink(store, TOPIC, partitions=4, max_batch=700) as sink:
        for event in events:
            sink.emit(event)
        await sink.flush()
        assert (sink.emitted, sink.written, sink.dropped, sink.pending) == (5_000, 5_000, 0, 0)
    assert await store.partitions(TOPIC) == 4
    back = await _read_all(store)
    assert len(back) == 5_000
    assert sorted(r.value for r in back) == sorted(e.to_bytes() for e in events)
    for record in back:
        event = AuditEvent.from_bytes(record.value)
        assert record.key == event.message_id.encode()
        assert record.headers == (("v", b"1"),)
        assert record.partition == partition_for(record.key, 4)
    assert _by_message(back) == _emitted_by_message(events)  # emit order per message id


async def test_the_background_task_writes_without_flush(store: EmbeddedSegmentStore) -> None:
    async with AuditSink(store, TOPIC, flush_interval_s=0.01) as sink:
        for i in range(50):
            sink.emit(_event(i))
        async with asyncio.timeout(5):
            while sink.written < 50:
                await asyncio.sleep(0.01)
    assert len(await _read_all(store)) == 50


async def test_an_existing_topic_is_reused(store: EmbeddedSegmentStore) -> None:
    await store.create_topic(TOPIC, 2, retention_ms=1_000_000)
    async with AuditSink(store, TOPIC, partitions=4) as sink:
        sink.emit(_event(1))
    assert await store.partitions(TOPIC) == 2
    [record] = await _read_all(store)
    assert record.partition == partition_for(b"msg-1", 2)


def test_emit_is_a_plain_function_that_needs_no_event_loop(tmp_path: Path) -> None:
    assert not inspect.iscoroutinefunction(AuditSink.emit)
    store = EmbeddedSegmentStore(EmbeddedSettings(path=tmp_path / "never-opened.db"))
    sink = AuditSink(store, TOPIC, max_batch=2)
    assert sink.emit(_event(1)) is None  # no loop is running here: nothing is awaited
    sink.emit(_event(2))  # reaching max_batch wakes the writer, still without a loop
    assert (sink.emitted, sink.pending) == (2, 2)


async def test_a_full_buffer_drops_and_counts(store: EmbeddedSegmentStore) -> None:
    sink = AuditSink(store, TOPIC, max_pending=10, flush_interval_s=60)
    async with sink:
        for i in range(25):
            sink.emit(_event(i))
        assert (sink.emitted, sink.dropped, sink.pending) == (25, 15, 10)
        await sink.flush()
        sink.emit(_event(99))  # room again
    assert (sink.emitted, sink.written, sink.dropped) == (26, 11, 15)
    back = await _read_all(store)
    assert sorted(r.value for r in back) == sorted(
        e.to_bytes() for e in [*map(_event, range(10)), _event(99)]
    )


async def test_emit_does_not_wait_for_a_stuck_store(store: EmbeddedSegmentStore) -> None:
    flaky = FlakyStore(store)
    flaky.stuck = asyncio.Event()
    async with AuditSink(flaky, TOPIC, max_batch=100, flush_interval_s=0.01) as sink:
        sink.emit(_event(0))
        async with asyncio.timeout(5):
            while flaky.calls == 0:  # the writer is now inside produce_many, hanging
                await asyncio.sleep(0.01)
        started = time.perf_counter()
        for i in range(1, 10_001):
            sink.emit(_event(i % 100))
        assert time.perf_counter() - started < 2.0  # loose: only "did not wait", not speed
        assert sink.pending == 10_000  # the batch in flight is out of the buffer
        flaky.stuck.set()
    assert sink.written == 10_001


async def test_a_failing_store_loses_nothing_and_keeps_order(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store, whole_failures=2)
    clock = FakeClock()
    events = [_event(i, messages=37) for i in range(3_000)]
    async with AuditSink(flaky, TOPIC, max_batch=500, flush_interval_s=0.01, clock=clock) as sink:
        for event in events[:1_000]:
            sink.emit(event)
        async with asyncio.timeout(5):
            while sink.failed_batches < 1:
                await asyncio.sleep(0.01)
        for event in events[1_000:]:  # emitted while the storage is down
            sink.emit(event)
        async with asyncio.timeout(10):
            while sink.written < 3_000:
                clock.now += 1.0  # past any backoff
                await asyncio.sleep(0.01)
        assert (sink.failed_batches, sink.dropped, sink.pending) == (2, 0, 0)
    back = await _read_all(store)
    assert len(back) == 3_000  # no loss and no duplicate
    assert _by_message(back) == _emitted_by_message(events)


async def test_records_that_fail_alone_are_retried_in_order(store: EmbeddedSegmentStore) -> None:
    flaky = FlakyStore(store)
    flaky.failing_keys = {b"msg-3": StorageUnavailable("x"), b"msg-8": StorageUnavailable("y")}
    events = [_event(i, messages=10) for i in range(200)]
    async with AuditSink(flaky, TOPIC, flush_interval_s=60) as sink:
        for event in events[:100]:
            sink.emit(event)
        await sink.flush()
        assert (sink.written, sink.pending, sink.failed_batches) == (80, 20, 1)
        for event in events[100:]:
            sink.emit(event)
        flaky.failing_keys = {}
        await sink.flush()
        assert (sink.written, sink.pending) == (200, 0)
    assert _by_message(await _read_all(store)) == _emitted_by_message(events)


async def test_retries_back_off_on_the_clock(store: EmbeddedSegmentStore) -> None:
    flaky = FlakyStore(store, whole_failures=1)
    clock = FakeClock()
    async with AuditSink(flaky, TOPIC, flush_interval_s=0.01, clock=clock) as sink:
        sink.emit(_event(1))
        async with asyncio.timeout(5):
            while sink.failed_batches < 1:
                await asyncio.sleep(0.01)
        for i in range(2, 2_500):  # even a full batch waiting does not cut the backoff short
            sink.emit(_event(i))
        await asyncio.sleep(0.3)  # thirty intervals, but the clock stands still
        assert (flaky.calls, sink.written) == (1, 0)
        clock.now += 0.021  # past the first backoff: twice the interval
        async with asyncio.timeout(5):
            while sink.written < 2_499:
                await asyncio.sleep(0.01)


async def test_an_event_failing_for_good_is_dropped_not_blocking(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store)
    flaky.failing_keys = {b"msg-5": TooLarge("audit test: too large")}
    async with AuditSink(flaky, TOPIC, flush_interval_s=60) as sink:
        for i in range(20):
            sink.emit(_event(i, messages=10))
        for _ in range(10):
            await sink.flush()
        assert (sink.written, sink.dropped, sink.pending) == (18, 2, 0)
    assert b"msg-5" not in {r.key for r in await _read_all(store)}


async def test_a_deleted_topic_is_created_again(store: EmbeddedSegmentStore) -> None:
    async with AuditSink(store, TOPIC, flush_interval_s=60) as sink:
        await store.delete_topic(TOPIC)
        sink.emit(_event(1))
        await sink.flush()  # NotFound: the event is kept, the topic marked missing
        assert (sink.written, sink.pending) == (0, 1)
        await sink.flush()
        assert (sink.written, sink.pending) == (1, 0)
    assert len(await _read_all(store)) == 1


async def test_aclose_writes_what_is_pending_and_later_emits_are_dropped(
    store: EmbeddedSegmentStore,
) -> None:
    sink = AuditSink(store, TOPIC, flush_interval_s=60)  # only aclose will write
    await sink.start()
    events = [_event(i) for i in range(1_234)]
    for event in events:
        sink.emit(event)
    assert sink.written == 0
    await sink.aclose()
    assert (sink.written, sink.pending) == (1_234, 0)
    sink.emit(_event(5_000))  # no exception
    await sink.aclose()  # idempotent
    assert (sink.emitted, sink.written, sink.dropped) == (1_235, 1_234, 1)
    assert sorted(r.value for r in await _read_all(store)) == sorted(e.to_bytes() for e in events)


async def test_aclose_is_bounded_when_the_storage_stays_down(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store, whole_failures=1_000_000)
    sink = AuditSink(flaky, TOPIC, flush_interval_s=0.01, close_timeout_s=0.5)
    await sink.start()
    for i in range(100):
        sink.emit(_event(i))
    started = time.monotonic()
    await sink.aclose()
    assert time.monotonic() - started < 3.0
    assert flaky.calls > 1  # it kept retrying until the deadline
    assert (sink.written, sink.dropped, sink.pending) == (0, 100, 0)
    assert sink.emitted == sink.written + sink.dropped + sink.pending


def test_audit_record_shape() -> None:
    event = _event(3)
    record = audit_record(event)
    assert (record.key, record.value, record.headers) == (
        b"msg-3",
        event.to_bytes(),
        (("v", b"1"),),
    )
    assert record.timestamp_ms is None  # the storage stamps the write time

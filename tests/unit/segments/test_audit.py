"""The audit sink on the embedded store: everything emitted is written and read back byte for
byte, packed many events per record within both bounds (events and bytes), ``emit`` never
waits (a full buffer drops and counts), a failing store loses nothing once it recovers and
retries a failed record whole, first, with the same bytes, retries back off on the injected
clock, and ``aclose`` writes what is pending.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from core.audit import AuditEvent
from core.errors import StorageUnavailable, TooLarge
from segments.audit import AuditSink, decode_audit_record
from segments.embedded import EmbeddedSegmentStore, EmbeddedSettings
from segments.protocol import Produced, Record, SegmentStore, Stored
from tests.support.audit_sink import nth_event
from tests.support.clock import ManualClock
from tests.support.stored import read_to_end
from tests.support.until import until

TOPIC = "__httpbus.audit"
KIB = 1024


class FlakyStore:
    """The embedded store, but ``produce_many`` fails as the test says (a fake *around* it),
    and every call is logged: the records asked for and what each got."""

    def __init__(self, inner: SegmentStore, whole_failures: int = 0) -> None:
        self.inner = inner
        self.whole_failures = whole_failures  # calls that raise StorageUnavailable
        self.fail: Callable[[Record], Exception | None] = lambda record: None  # one by one
        self.calls = 0
        self.log: list[tuple[list[Record], list[Produced | Exception]]] = []
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
            self.log.append((list(records), [StorageUnavailable("down")] * len(records)))
            raise StorageUnavailable("audit test: storage down")
        failures = [self.fail(r) for r in records]
        passing = [r for r, failure in zip(records, failures, strict=True) if failure is None]
        written = iter(await self.inner.produce_many(name, passing))
        results = [failure or next(written) for failure in failures]
        self.log.append((list(records), results))
        return results

    def written_in_order(self) -> list[AuditEvent]:
        """The events of every record written, in the order they were produced."""
        return [
            event
            for records, results in self.log
            for record, result in zip(records, results, strict=True)
            if not isinstance(result, Exception)
            for event in decode_audit_record(record.value)
        ]


def _has_position(*positions: int, error: Exception) -> Callable[[Record], Exception | None]:
    """Fail the records holding an event at one of ``positions``."""

    def fail(record: Record) -> Exception | None:
        held = {e.position for e in decode_audit_record(record.value)}
        return error if held & set(positions) else None

    return fail


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[EmbeddedSegmentStore]:
    settings = EmbeddedSettings(path=tmp_path / "audit.db", produce_timeout_s=5.0)
    async with EmbeddedSegmentStore(settings) as opened:
        yield opened


async def _read_all(store: SegmentStore, topic: str = TOPIC) -> list[Stored]:
    """Every record of the topic, partition by partition, each in stored order."""
    return await read_to_end(store, topic, timeout=1.0)


def _lines(records: Sequence[Stored | Record]) -> list[bytes]:
    return [line for record in records for line in record.value.split(b"\n")]


def _sorted_bytes(events: Sequence[AuditEvent]) -> list[bytes]:
    return sorted(event.to_bytes() for event in events)


def _balanced(sink: AuditSink) -> bool:
    return sink.emitted == sink.written + sink.dropped + sink.pending


async def test_every_event_is_written_and_read_back_byte_identical(
    store: EmbeddedSegmentStore,
) -> None:
    events = [nth_event(i) for i in range(5_000)]
    async with AuditSink(store, TOPIC, partitions=4, max_batch=700) as sink:
        for event in events:
            sink.emit(event)
        await sink.flush()
        assert (sink.emitted, sink.written, sink.dropped, sink.pending) == (5_000, 5_000, 0, 0)
    assert await store.partitions(TOPIC) == 4
    back = await _read_all(store)
    assert len(back) == 7 * 2 + 1  # batches of 700 = 500 + 200 events; the last 100 in one
    assert sorted(_lines(back)) == _sorted_bytes(events)  # byte identical, none twice
    assert sorted(e.at_ms for r in back for e in decode_audit_record(r.value)) == [
        e.at_ms for e in events
    ]
    for record in back:
        count = len(decode_audit_record(record.value))
        assert record.key is None
        assert record.headers == (("v", b"1"), ("n", str(count).encode()))
        assert 1 <= count <= 500
    assert {r.partition for r in back} == {0, 1, 2, 3}  # no key: spread round-robin


async def test_a_value_splits_on_newlines_even_when_events_hold_some() -> None:
    events = [nth_event(i, error="a\nb\r\n\x00\\n ✓") for i in range(3)]
    value = b"\n".join(e.to_bytes() for e in events)
    assert value.count(b"\n") == 2  # JSON escaped the newlines inside the strings
    assert decode_audit_record(value) == events
    assert decode_audit_record(b"") == []


async def test_the_background_task_writes_without_flush(store: EmbeddedSegmentStore) -> None:
    async with AuditSink(store, TOPIC, flush_interval_s=0.01) as sink:
        for i in range(50):
            sink.emit(nth_event(i))
        await until(lambda: sink.written >= 50, 5, "50 written", interval=0.01)
    assert sorted(_lines(await _read_all(store))) == _sorted_bytes(
        [nth_event(i) for i in range(50)]
    )


async def test_an_existing_topic_is_reused(store: EmbeddedSegmentStore) -> None:
    await store.create_topic(TOPIC, 2, retention_ms=1_000_000)
    async with AuditSink(store, TOPIC, partitions=4) as sink:
        sink.emit(nth_event(1))
    assert await store.partitions(TOPIC) == 2
    [record] = await _read_all(store)
    assert decode_audit_record(record.value) == [nth_event(1)]


async def test_records_respect_the_size_bound_with_large_events(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store)  # only to see the records in the order they were produced
    sizes = [(i * 7919) % (40 * KIB) + 1 for i in range(300)]  # 1 B to 40 KiB of error
    sizes[100] = sizes[250] = 700 * KIB  # larger than a record may be: each goes alone
    events = [nth_event(i, error="x" * size) for i, size in enumerate(sizes)]
    async with AuditSink(flaky, TOPIC, max_batch=1_000, flush_interval_s=60) as sink:
        for event in events:
            sink.emit(event)
        await sink.flush()
        assert (sink.written, sink.pending, flaky.calls) == (300, 0, 1)  # one produce_many
    [(records, _)] = flaky.log
    assert _lines(records) == [e.to_bytes() for e in events]  # packed in emit order
    for record, after in zip(records, [*records[1:], None], strict=True):
        count = len(decode_audit_record(record.value))
        assert record.headers[1] == ("n", str(count).encode())
        assert len(record.value) <= 512 * KIB or count == 1
        if after is not None:  # full: the next event would not have fit
            assert len(record.value) + 1 + len(after.value.split(b"\n")[0]) > 512 * KIB
    huge = [r for r in records if len(r.value) > 512 * KIB]
    assert [decode_audit_record(r.value) for r in huge] == [[events[100]], [events[250]]]
    assert len(await _read_all(store)) == len(records)


async def test_records_hold_at_most_events_per_record(store: EmbeddedSegmentStore) -> None:
    async with AuditSink(store, TOPIC, events_per_record=64, flush_interval_s=60) as sink:
        for i in range(1_000):
            sink.emit(nth_event(i))
    back = await _read_all(store)
    assert sorted(len(decode_audit_record(r.value)) for r in back) == [40] + [64] * 15
    assert sorted(_lines(back)) == _sorted_bytes([nth_event(i) for i in range(1_000)])


def test_emit_is_a_plain_function_that_needs_no_event_loop(tmp_path: Path) -> None:
    assert not inspect.iscoroutinefunction(AuditSink.emit)
    store = EmbeddedSegmentStore(EmbeddedSettings(path=tmp_path / "never-opened.db"))
    sink = AuditSink(store, TOPIC, max_batch=2)
    assert sink.emit(nth_event(1)) is None  # no loop is running here: nothing is awaited
    sink.emit(nth_event(2))  # reaching max_batch wakes the writer, still without a loop
    assert (sink.emitted, sink.pending) == (2, 2)


async def test_a_full_buffer_drops_and_counts(store: EmbeddedSegmentStore) -> None:
    sink = AuditSink(store, TOPIC, max_pending=10, flush_interval_s=60)
    async with sink:
        for i in range(25):
            sink.emit(nth_event(i))
        assert (sink.emitted, sink.dropped, sink.pending) == (25, 15, 10)
        await sink.flush()
        sink.emit(nth_event(99))  # room again
    assert (sink.emitted, sink.written, sink.dropped) == (26, 11, 15)
    back = await _read_all(store)
    assert sorted(_lines(back)) == _sorted_bytes([*map(nth_event, range(10)), nth_event(99)])


async def test_emit_does_not_wait_for_a_stuck_store(store: EmbeddedSegmentStore) -> None:
    flaky = FlakyStore(store)
    flaky.stuck = asyncio.Event()
    async with AuditSink(flaky, TOPIC, max_batch=100, flush_interval_s=0.01) as sink:
        sink.emit(nth_event(0))
        # the writer is then inside produce_many, hanging
        await until(lambda: flaky.calls > 0, 5, "the writer in produce_many", interval=0.01)
        started = time.perf_counter()
        for i in range(1, 10_001):
            sink.emit(nth_event(i % 100))
        assert time.perf_counter() - started < 2.0  # loose: only "did not wait", not speed
        assert sink.pending == 10_000  # the batch in flight is out of the buffer
        flaky.stuck.set()
    assert sink.written == 10_001


async def test_a_failing_store_loses_nothing_and_keeps_order(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store, whole_failures=2)
    clock = ManualClock(1_000.0)
    events = [nth_event(i, messages=37) for i in range(3_000)]
    async with AuditSink(flaky, TOPIC, max_batch=500, flush_interval_s=0.01, clock=clock) as sink:
        for event in events[:1_000]:
            sink.emit(event)
        await until(lambda: sink.failed_batches >= 1, 5, "a failed batch", interval=0.01)
        assert _balanced(sink)
        for event in events[1_000:]:  # emitted while the storage is down
            sink.emit(event)

        def all_written() -> bool:
            clock.now += 1.0  # past any backoff
            return sink.written >= 3_000

        await until(all_written, 10, "3 000 written", interval=0.01)
        assert (sink.failed_batches, sink.dropped, sink.pending) == (2, 0, 0)
    assert flaky.written_in_order() == events  # the failed record went first: emit order
    failed = [r.value for records, _ in flaky.log[:2] for r in records]
    assert failed[0] == failed[1] == flaky.log[2][0][0].value  # retried whole, same bytes
    back = await _read_all(store)
    assert sorted(_lines(back)) == _sorted_bytes(events)  # no loss and no duplicate


async def test_a_record_that_fails_alone_is_retried_whole_and_first(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store)
    flaky.fail = _has_position(30, 80, error=StorageUnavailable("partition down"))
    events = [nth_event(i, messages=10) for i in range(200)]
    kw: dict[str, Any] = {"events_per_record": 10, "flush_interval_s": 60}
    async with AuditSink(flaky, TOPIC, **kw) as sink:
        for event in events[:100]:
            sink.emit(event)
        await sink.flush()
        assert (sink.written, sink.pending, sink.failed_batches) == (80, 20, 1)
        assert _balanced(sink)
        for event in events[100:]:
            sink.emit(event)
        flaky.fail = lambda record: None
        await sink.flush()
        assert (sink.written, sink.pending, sink.dropped) == (200, 0, 0)
    (first, results), (second, _) = flaky.log
    failed = [r for r, result in zip(first, results, strict=True) if isinstance(result, Exception)]
    assert [decode_audit_record(r.value) for r in failed] == [events[30:40], events[80:90]]
    assert second[:2] == failed  # whole (same value and headers), in order, before new events
    assert _lines(second[2:]) == [e.to_bytes() for e in events[100:]]
    assert sorted(_lines(await _read_all(store))) == _sorted_bytes(events)


async def test_retries_back_off_on_the_clock(store: EmbeddedSegmentStore) -> None:
    flaky = FlakyStore(store, whole_failures=1)
    clock = ManualClock(1_000.0)
    async with AuditSink(flaky, TOPIC, flush_interval_s=0.01, clock=clock) as sink:
        sink.emit(nth_event(1))
        await until(lambda: sink.failed_batches >= 1, 5, "a failed batch", interval=0.01)
        for i in range(2, 2_500):  # even a full batch waiting does not cut the backoff short
            sink.emit(nth_event(i))
        await asyncio.sleep(0.3)  # proves nothing is retried: thirty intervals, the clock stands
        assert (flaky.calls, sink.written) == (1, 0)
        clock.now += 0.021  # past the first backoff: twice the interval
        await until(lambda: sink.written >= 2_499, 5, "2 499 written", interval=0.01)


async def test_a_record_failing_for_good_is_dropped_not_blocking(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store)

    def too_large(record: Record) -> Exception | None:  # a broker with a 100 KiB limit
        return TooLarge("audit test: too large") if len(record.value) > 100 * KIB else None

    flaky.fail = too_large
    events = [nth_event(i, error="y" * (200 * KIB) if i == 5 else None) for i in range(20)]
    async with AuditSink(flaky, TOPIC, max_record_bytes=50 * KIB, flush_interval_s=60) as sink:
        for event in events:
            sink.emit(event)
        for _ in range(10):
            await sink.flush()
        assert (sink.written, sink.dropped, sink.pending) == (19, 1, 0)
    tried = [r for records, _ in flaky.log for r in records if len(r.value) > 100 * KIB]
    assert [decode_audit_record(r.value) for r in tried] == [[events[5]]] * 5  # then dropped
    back = await _read_all(store)
    assert sorted(_lines(back)) == _sorted_bytes(events[:5] + events[6:])


async def test_a_deleted_topic_is_created_again(store: EmbeddedSegmentStore) -> None:
    async with AuditSink(store, TOPIC, flush_interval_s=60) as sink:
        await store.delete_topic(TOPIC)
        sink.emit(nth_event(1))
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
    events = [nth_event(i) for i in range(1_234)]
    for event in events:
        sink.emit(event)
    assert sink.written == 0
    await sink.aclose()
    assert (sink.written, sink.pending) == (1_234, 0)
    sink.emit(nth_event(5_000))  # no exception
    await sink.aclose()  # idempotent
    assert (sink.emitted, sink.written, sink.dropped) == (1_235, 1_234, 1)
    assert sorted(_lines(await _read_all(store))) == _sorted_bytes(events)


async def test_aclose_is_bounded_when_the_storage_stays_down(
    store: EmbeddedSegmentStore,
) -> None:
    flaky = FlakyStore(store, whole_failures=1_000_000)
    sink = AuditSink(flaky, TOPIC, flush_interval_s=0.01, close_timeout_s=0.5)
    await sink.start()
    for i in range(100):
        sink.emit(nth_event(i))
    started = time.monotonic()
    await sink.aclose()
    assert time.monotonic() - started < 3.0
    assert flaky.calls > 1  # it kept retrying until the deadline
    assert (sink.written, sink.dropped, sink.pending) == (0, 100, 0)
    assert _balanced(sink)


async def test_durable_says_when_every_event_up_to_a_mark_is_written(
    store: EmbeddedSegmentStore,
) -> None:
    """A worker commits only once :meth:`AuditSink.durable` is true for the events emitted
    before it took its positions: false while the storage is down (nothing lost, the events
    wait), true once written, and events emitted after the mark never hold it back."""
    flaky = FlakyStore(store, whole_failures=2)
    async with AuditSink(flaky, TOPIC, max_batch=100, flush_interval_s=60) as sink:
        for i in range(10):
            sink.emit(nth_event(i))
        mark = sink.mark()
        assert not await sink.durable(mark)  # the storage is down: flush failed
        assert not await sink.durable(mark)
        assert sink.pending == 10
        sink.emit(nth_event(10))  # after the mark
        flaky.stuck = asyncio.Event()  # the next write hangs, as a slow storage would
        waiting = asyncio.create_task(sink.durable(mark))
        await until(lambda: flaky.calls == 3, 5, "the third write under way", interval=0.01)
        assert not waiting.done()  # in flight is not durable
        flaky.stuck.set()
        assert await waiting
        assert sink.written == 11
        sink.emit(nth_event(11))
        assert await sink.durable(mark)  # already settled: no flush needed
        assert sink.pending == 1

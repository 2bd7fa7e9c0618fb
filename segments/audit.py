"""The audit sink: a batched writer of audit events to the internal audit storage topic.

Producers and workers call :meth:`AuditSink.emit` on their hot path. It is a plain function,
O(1), that only appends the event to a bounded in-memory buffer; a background task writes the
buffer to the audit topic with ``store.produce_many`` every ``flush_interval_s`` (sooner once
``max_batch`` events wait), in batches of up to ``max_batch`` events.

**Many events per record.** A storage record per event doubled the records of the produce path
and cost a quarter of the producer's CPU in batch produce: the price is per record, not per
byte. So events are packed: a batch becomes a few records written with one ``produce_many``.
A record's value is its events' JSON (:meth:`AuditEvent.to_bytes`) joined by ``b"\\n"``; JSON
escapes every newline inside a string, so **a reader (the Spark jobs included) splits the value
on** ``b"\\n"`` **and parses each line** (:func:`decode_audit_record`). Headers: ``v``, the
record layout version (1; each event carries its own schema ``v``), and ``n``, the event count
in ASCII decimal. A record holds up to ``events_per_record`` events and at most
``max_record_bytes`` of value (512 KiB: half of Kafka's default 1 MiB message limit, leaving
room for headers and batch framing); an event larger than that travels alone. Records have no
key, so the store spreads them over the partitions round-robin: a record holds the events of
many messages, so no key could keep one message's events together, and a key taken from one
event would skew the partitions. Hence the events of one message may sit in different records
and partitions, and their storage order means nothing: **readers order them by** ``at_ms``
(the reconciliation treats the trail of a message as a set).

**Why off the hot path.** A produce answers 2xx once the *message* is durable. Writing its
``accepted`` event in the same request would add a second storage round trip to every
produce's latency, and would turn an audit-topic outage into a produce outage. So the hot path
never waits on the audit: when the buffer is full (storage slow or down for long), ``emit``
drops the event and counts it in ``dropped`` rather than blocking or growing without bound.

**What the trail guarantees.** It is a best-effort trail, not the source of truth (the segments
are). Events still in memory when the process dies are lost — including those of messages
acknowledged just before a crash — so the Spark reconciliation reports a message with no
``accepted`` event as "no accepted event", never as a lost message. While the process lives,
nothing is lost while the buffer has room: a record that fails (``StorageUnavailable`` for the
whole batch, or an exception for that record) is kept whole, the same bytes, at the front of
the buffer, failed records in their order, and retried with exponential backoff before any
newer event. A record stored but not acknowledged in time is written again: readers may see
its events twice. A record that fails for a reason other than ``StorageUnavailable`` (too
large, say) ``_MAX_ATTEMPTS`` times is dropped with its events, so one bad record cannot block
the trail behind it; since an event too large to share a record travels alone, only that event
is lost (unless the topic's limit is below ``max_record_bytes``). Counters count events:
``emitted == written + dropped + pending``.

``emit`` must be called on the event loop's thread (or before the loop runs). The sink does
not own the store: close the sink first, then the store.

Example::

    async with AuditSink(store, "__httpbus.audit") as audit:
        audit.emit(AuditEvent(type=AuditType.ACCEPTED, message_id="m1", project="p",
                              topic="orders", at_ms=now_ms))
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass

from core.audit import AuditEvent, Encoded
from core.errors import (
    AlreadyExists,
    HttpbusError,
    NotFound,
    StorageUnavailable,
    ValidationFailed,
)
from core.lifecycle import AsyncResource

from .config import AuditConfig
from .protocol import Produced, Record, SegmentStore

log = logging.getLogger(__name__)

RECORD_LAYOUT = 1
"""Header ``v`` of an audit record: how its value packs events (JSON lines)."""

_MAX_BACKOFF_S = 5.0
# Attempts of one record that keeps failing for a reason a retry is unlikely to cure.
_MAX_ATTEMPTS = 5
_LAYOUT_HEADER = ("v", str(RECORD_LAYOUT).encode())


def decode_audit_record(value: bytes) -> list[AuditEvent]:
    """The events packed in the value of an audit record, in the order they were packed."""
    if not value:
        return []
    return [AuditEvent.from_bytes(line) for line in value.split(b"\n")]


@dataclass(slots=True)
class _Chunk:
    """One record of the trail, built once and retried as is."""

    record: Record
    events: int
    first: int  # the sequence number of its first event (see AuditSink.durable)
    attempts: int = 0  # failed non-transient attempts so far


def _chunk(lines: list[bytes], first: int) -> _Chunk:
    headers = (_LAYOUT_HEADER, ("n", str(len(lines)).encode()))
    return _Chunk(Record(value=b"\n".join(lines), headers=headers), len(lines), first)


class AuditSink(AsyncResource):
    """Buffers audit events and writes them in batches to the audit storage topic ``topic``,
    up to ``events_per_record`` events or ``max_record_bytes`` bytes of value per record.

    ``clock`` (seconds) times the retry backoff; ``close_timeout_s`` bounds the final flush of
    :meth:`aclose`. The counters ``emitted``, ``written``, ``dropped`` and ``failed_batches``
    and the ``pending`` gauge are for ``/metrics``; all but ``failed_batches`` count events.
    """

    def __init__(
        self,
        store: SegmentStore,
        topic: str,
        *,
        partitions: int = 4,
        retention_ms: int = 7 * 24 * 3600 * 1000,
        max_batch: int = 1000,
        events_per_record: int = 500,
        max_record_bytes: int = 512 * 1024,
        flush_interval_s: float = 0.1,
        max_pending: int = 100_000,
        clock: Callable[[], float] = time.time,
        close_timeout_s: float = 10.0,
        durable_timeout_s: float = 5.0,
    ) -> None:
        if min(max_batch, max_pending, events_per_record, max_record_bytes) < 1:
            raise ValidationFailed(
                "audit sink: max_batch, max_pending, events_per_record and max_record_bytes >= 1"
            )
        if flush_interval_s <= 0:
            raise ValidationFailed("audit sink: flush_interval_s > 0")
        self._store = store
        self._topic = topic
        self._partitions = partitions
        self._retention_ms = retention_ms
        self._max_batch = max_batch
        self._per_record = events_per_record
        self._max_bytes = max_record_bytes
        self._interval = flush_interval_s
        self._max_pending = max_pending
        self._clock = clock
        self._close_timeout_s = close_timeout_s
        self._durable_timeout_s = durable_timeout_s
        self._pending: deque[tuple[int, AuditEvent | Encoded]] = (
            deque()
        )  # new, with sequence numbers
        self._in_flight: list[_Chunk] = []  # the batch being written
        self._retry: deque[_Chunk] = deque()  # failed records, written before the new events
        self._retry_events = 0  # events in self._retry
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()  # one batch in flight at a time: keeps the order
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self._topic_missing = False
        self._failures = 0  # consecutive failed batches
        self._retry_at = 0.0  # clock(): the background task writes again from then on
        self.emitted = 0
        self.written = 0
        self.dropped = 0
        self.failed_batches = 0

    @property
    def pending(self) -> int:
        """Events in memory, not yet written (a batch in flight is not pending)."""
        return len(self._pending) + self._retry_events

    async def start(self) -> None:
        """Create the audit topic if missing and start the background writer."""
        if self._task is not None or self._closed:
            return
        await self._create_topic()
        self._task = asyncio.create_task(self._run(), name="httpbus-audit-sink")

    def emit(self, event: AuditEvent | Encoded) -> None:
        """Queue ``event`` (or its line, already encoded) for writing; never blocks. Dropped
        (and counted) when the buffer is full or the sink is closed."""
        self.emitted += 1
        if self._closed or len(self._pending) + self._retry_events >= self._max_pending:
            self.dropped += 1
            return
        self._pending.append((self.emitted, event))
        if len(self._pending) >= self._max_batch:
            self._wake.set()

    async def flush(self) -> None:
        """Write every event pending now, ignoring the backoff; stops at the first failed
        batch (its failed records stay pending). Storage errors are counted, not raised."""
        async with self._lock:
            budget = self.pending  # not the events emitted meanwhile: flush must end
            while budget > 0 and self.pending:
                ok, taken = await self._write_batch()
                if not ok:
                    return
                budget -= taken

    def mark(self) -> int:
        """The sequence number of the last event emitted so far, for :meth:`durable`."""
        return self.emitted

    async def durable(self, mark: int) -> bool:
        """Whether every event emitted up to ``mark`` is settled: written, or dropped (and
        counted). Flushes first if it is not. False while the audit topic cannot be written.

        A worker commits a source position only once this is true for the events emitted
        before the position was taken, so a crash loses no event of a committed message."""
        if self._settled(mark):
            return True
        flushing = asyncio.ensure_future(self.flush())
        flushing.add_done_callback(_retrieved)
        await asyncio.wait({flushing}, timeout=self._durable_timeout_s)
        return self._settled(mark)

    def _settled(self, mark: int) -> bool:
        firsts = [chunk.first for chunk in (*self._in_flight, *self._retry)]
        if self._pending:
            firsts.append(self._pending[0][0])
        return not firsts or min(firsts) > mark

    async def aclose(self) -> None:
        """Stop taking events, write the pending ones (retrying for up to ``close_timeout_s``),
        then stop. Events still unwritten then are counted as dropped."""
        if self._closed:
            return
        self._closed = True
        self._wake.set()
        task, self._task = self._task, None
        try:
            async with asyncio.timeout(self._close_timeout_s):
                if task is not None:
                    await asyncio.wait({task})
                while self.pending:
                    await self.flush()
                    if self.pending:
                        await asyncio.sleep(self._backoff_s())
        except TimeoutError:
            log.warning("audit sink: %d events unwritten at close, dropped", self.pending)
        finally:
            if task is not None and not task.done():
                task.cancel()
                await asyncio.wait({task})
            self.dropped += self.pending
            self._pending.clear()
            self._retry.clear()
            self._retry_events = 0

    async def _create_topic(self) -> None:
        try:
            await self._store.create_topic(
                self._topic, self._partitions, retention_ms=self._retention_ms
            )
        except AlreadyExists:
            pass
        self._topic_missing = False

    async def _run(self) -> None:
        while not self._closed:
            if self._clock() < self._retry_at:
                await asyncio.sleep(self._interval)  # backing off: emits must not wake us
                continue
            try:
                async with asyncio.timeout(self._interval):
                    await self._wake.wait()
            except TimeoutError:
                pass
            self._wake.clear()
            if self._closed:
                return  # aclose writes the rest
            try:
                await self.flush()
            except Exception:  # the writer must outlive any bug of a store
                log.exception("audit sink: flush failed")

    async def _write_batch(self) -> tuple[bool, int]:
        """Write the next batch: whether all of it was written (failed records stay first),
        and how many events it took from the buffer."""
        batch = self._take()
        taken = sum(chunk.events for chunk in batch)
        if not batch:
            return True, taken
        self._in_flight = batch
        try:
            if self._topic_missing:
                await self._create_topic()
            results = await self._store.produce_many(self._topic, [c.record for c in batch])
            if len(results) != len(batch):
                raise StorageUnavailable(f"audit: {len(results)} results for {len(batch)}")
        except asyncio.CancelledError:
            self._keep(batch)
            raise
        except Exception as exc:
            if not isinstance(exc, HttpbusError):
                log.exception("audit sink: produce to %s failed", self._topic)
            results = [exc] * len(batch)
        finally:
            self._in_flight = []
        return self._settle(batch, results), taken

    def _take(self) -> list[_Chunk]:
        """Failed records first (whole, as many as fit in a batch, at least one), then new
        events packed into records, up to ``max_batch`` events in all."""
        batch: list[_Chunk] = []
        taken = 0
        while self._retry and (not batch or taken + self._retry[0].events <= self._max_batch):
            chunk = self._retry.popleft()
            self._retry_events -= chunk.events
            batch.append(chunk)
            taken += chunk.events
        if taken < self._max_batch and self._pending:
            batch.extend(self._pack(self._max_batch - taken))
        return batch

    def _pack(self, room: int) -> list[_Chunk]:
        """Take up to ``room`` new events and pack them into records."""
        chunks: list[_Chunk] = []
        lines: list[bytes] = []
        first = 0
        size = -1  # len(b"\n".join(lines))
        for _ in range(min(room, len(self._pending))):
            seq, event = self._pending.popleft()
            try:
                line = event.to_bytes()
            except Exception:  # a bug, not a storage state: drop it rather than lose count
                self.dropped += 1
                log.exception("audit sink: event of %s not encodable", event.message_id)
                continue
            if lines and (len(lines) >= self._per_record or size + 1 + len(line) > self._max_bytes):
                chunks.append(_chunk(lines, first))
                lines, size = [], -1
            if not lines:
                first = seq
            lines.append(line)
            size += 1 + len(line)
        if lines:
            chunks.append(_chunk(lines, first))
        return chunks

    def _keep(self, failed: list[_Chunk]) -> None:
        """Put failed records back at the front of the buffer, in their order."""
        self._retry.extendleft(reversed(failed))
        self._retry_events += sum(chunk.events for chunk in failed)

    def _settle(self, batch: list[_Chunk], results: list[Produced | Exception]) -> bool:
        failed: list[_Chunk] = []
        error: Exception | None = None
        for chunk, result in zip(batch, results, strict=True):
            if not isinstance(result, Exception):
                self.written += chunk.events
                continue
            error = result
            if isinstance(result, NotFound):
                self._topic_missing = True  # deleted behind our back: create it again
            if not isinstance(result, StorageUnavailable):
                chunk.attempts += 1
            if chunk.attempts < _MAX_ATTEMPTS:
                failed.append(chunk)
            else:
                self.dropped += chunk.events
                log.warning("audit sink: record of %d events dropped: %s", chunk.events, result)
        if error is None:
            self._failures = 0
            self._retry_at = 0.0
            return True
        self._keep(failed)
        self.failed_batches += 1
        self._failures += 1
        self._retry_at = self._clock() + self._backoff_s()
        log.warning(
            "audit sink: batch to %s failed (%d records kept, retry in %.2fs): %s",
            self._topic,
            len(failed),
            self._backoff_s(),
            error,
        )
        return False

    def _backoff_s(self) -> float:
        """Doubles with every consecutive failed batch, from twice the flush interval."""
        return float(min(_MAX_BACKOFF_S, self._interval * 2 ** min(self._failures, 30)))


def _retrieved(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("audit sink: flush failed: %r", future.exception())


async def open_audit(
    stack: AsyncExitStack, stores: Mapping[str, SegmentStore], config: AuditConfig
) -> AuditSink | None:
    """The started sink ``config`` asks for (closed with ``stack``), or None when it names
    no cluster."""
    if config.cluster is None:
        return None
    sink = AuditSink(stores[config.cluster], config.topic, partitions=config.partitions)
    return await stack.enter_async_context(sink)

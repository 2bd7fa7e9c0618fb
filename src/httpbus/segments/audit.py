"""The audit sink: a batched writer of audit events to the internal audit storage topic.

Producers and workers call :meth:`AuditSink.emit` on their hot path. It is a plain function,
O(1), that only appends the event to a bounded in-memory buffer; a background task writes the
buffer to the audit topic with ``store.produce_many`` every ``flush_interval_s`` (sooner once
``max_batch`` events wait), in batches of up to ``max_batch`` records.

**Why off the hot path.** A produce answers 2xx once the *message* is durable. Writing its
``accepted`` event in the same request would add a second storage round trip to every
produce's latency, and would turn an audit-topic outage into a produce outage. So the hot path
never waits on the audit: when the buffer is full (storage slow or down for long), ``emit``
drops the event and counts it in ``dropped`` rather than blocking or growing without bound.

**What the trail guarantees.** It is a best-effort trail, not the source of truth (the segments
are). Events still in memory when the process dies are lost — including those of messages
acknowledged just before a crash — so the Spark reconciliation reports a message with no
``accepted`` event as "no accepted event", never as a lost message. While the process lives,
nothing is lost while the buffer has room: a batch that fails (``StorageUnavailable``, or an
exception for some of its records) keeps its failed events at the front of the buffer, in their
order, and retries them with exponential backoff. Records are keyed by ``message_id``, so all
events of one message land in one partition in emit order (a backend that acknowledges a
later record of a key after failing an earlier one could break that; neither the embedded
store, one transaction per batch, nor Kafka's idempotent producer, which fails the rest of a
partition's queue with it, does). A record stored but not acknowledged in time is written again:
readers may see an event twice. An event whose record fails for a reason other than
``StorageUnavailable`` (too large, say) ``_MAX_ATTEMPTS`` times is dropped, so one bad event
cannot block the trail behind it. Counters: ``emitted == written + dropped + pending``.

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
from collections.abc import Callable

from httpbus.core.lifecycle import AsyncResource

from ..core.audit import AuditEvent
from ..core.errors import (
    AlreadyExists,
    HttpbusError,
    NotFound,
    StorageUnavailable,
    ValidationFailed,
)
from .protocol import Produced, Record, SegmentStore

log = logging.getLogger(__name__)

_MAX_BACKOFF_S = 5.0
# Attempts of one event whose record keeps failing for a reason a retry is unlikely to cure.
_MAX_ATTEMPTS = 5

_Item = tuple[AuditEvent, int]  # an event and its failed non-transient attempts so far


def audit_record(event: AuditEvent) -> Record:
    """The record of an event: keyed by message id, its JSON as value, the schema version in
    header ``v``."""
    return Record(
        value=event.to_bytes(),
        key=event.message_id.encode(),
        headers=(("v", str(event.v).encode()),),
    )


class AuditSink(AsyncResource):
    """Buffers audit events and writes them in batches to the audit storage topic ``topic``.

    ``clock`` (seconds) times the retry backoff; ``close_timeout_s`` bounds the final flush of
    :meth:`aclose`. The counters ``emitted``, ``written``, ``dropped`` and ``failed_batches``
    and the ``pending`` gauge are for ``/metrics``.
    """

    def __init__(
        self,
        store: SegmentStore,
        topic: str,
        *,
        partitions: int = 4,
        retention_ms: int = 7 * 24 * 3600 * 1000,
        max_batch: int = 1000,
        flush_interval_s: float = 0.1,
        max_pending: int = 100_000,
        clock: Callable[[], float] = time.time,
        close_timeout_s: float = 10.0,
    ) -> None:
        if max_batch < 1 or max_pending < 1 or flush_interval_s <= 0:
            raise ValidationFailed("audit sink: max_batch, max_pending and flush_interval_s > 0")
        self._store = store
        self._topic = topic
        self._partitions = partitions
        self._retention_ms = retention_ms
        self._max_batch = max_batch
        self._interval = flush_interval_s
        self._max_pending = max_pending
        self._clock = clock
        self._close_timeout_s = close_timeout_s
        self._pending: deque[AuditEvent] = deque()  # new events, in emit order
        self._retry: deque[_Item] = deque()  # failed events, written before the new ones
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
        """Events in memory, not yet written."""
        return len(self._pending) + len(self._retry)

    async def start(self) -> None:
        """Create the audit topic if missing and start the background writer."""
        if self._task is not None or self._closed:
            return
        await self._create_topic()
        self._task = asyncio.create_task(self._run(), name="httpbus-audit-sink")

    def emit(self, event: AuditEvent) -> None:
        """Queue ``event`` for writing; never blocks. Dropped (and counted) when the buffer
        is full or the sink is closed."""
        self.emitted += 1
        if self._closed or len(self._pending) + len(self._retry) >= self._max_pending:
            self.dropped += 1
            return
        self._pending.append(event)
        if len(self._pending) >= self._max_batch:
            self._wake.set()

    async def flush(self) -> None:
        """Write every event pending now, ignoring the backoff; stops at the first failed
        batch (its events stay pending). Storage errors are counted, not raised."""
        async with self._lock:
            batches = -(-self.pending // self._max_batch)
            for _ in range(batches):
                if not await self._write_batch():
                    return

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

    async def _write_batch(self) -> bool:
        """Write the next batch; False if any of it failed (the failed events stay first)."""
        batch = self._take()
        try:
            if self._topic_missing:
                await self._create_topic()
            records = [audit_record(event) for event, _ in batch]
            results = await self._store.produce_many(self._topic, records)
            if len(results) != len(batch):
                raise StorageUnavailable(f"audit: {len(results)} results for {len(batch)}")
        except asyncio.CancelledError:
            self._retry.extendleft(reversed(batch))
            raise
        except Exception as exc:
            if not isinstance(exc, HttpbusError):
                log.exception("audit sink: produce to %s failed", self._topic)
            results = [exc] * len(batch)
        return self._settle(batch, results)

    def _take(self) -> list[_Item]:
        batch: list[_Item] = []
        while self._retry and len(batch) < self._max_batch:
            batch.append(self._retry.popleft())
        while self._pending and len(batch) < self._max_batch:
            batch.append((self._pending.popleft(), 0))
        return batch

    def _settle(self, batch: list[_Item], results: list[Produced | Exception]) -> bool:
        failed: list[_Item] = []
        error: Exception | None = None
        for (event, attempts), result in zip(batch, results, strict=True):
            if not isinstance(result, Exception):
                self.written += 1
                continue
            error = result
            if isinstance(result, NotFound):
                self._topic_missing = True  # deleted behind our back: create it again
            if isinstance(result, StorageUnavailable):
                failed.append((event, attempts))
            elif attempts + 1 < _MAX_ATTEMPTS:
                failed.append((event, attempts + 1))
            else:
                self.dropped += 1
                log.warning("audit sink: event of %s dropped: %s", event.message_id, result)
        if error is None:
            self._failures = 0
            self._retry_at = 0.0
            return True
        self._retry.extendleft(reversed(failed))
        self.failed_batches += 1
        self._failures += 1
        self._retry_at = self._clock() + self._backoff_s()
        log.warning(
            "audit sink: batch to %s failed (%d events kept, retry in %.2fs): %s",
            self._topic,
            len(failed),
            self._backoff_s(),
            error,
        )
        return False

    def _backoff_s(self) -> float:
        """Doubles with every consecutive failed batch, from twice the flush interval."""
        return float(min(_MAX_BACKOFF_S, self._interval * 2 ** min(self._failures, 30)))

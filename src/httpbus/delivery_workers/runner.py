"""One subscription's delivery loop: read → filter → order → push → retry → commit.

A :class:`SubscriptionRunner` delivers its subscription segment by segment. Per segment:

- a *reader* task per partition reads from the committed position, tracks every message in
  the :class:`CommitTracker`, commits filtered-out messages at once, and offers the rest to
  the :class:`GroupScheduler` (back-pressure: it stops reading while the scheduler is full);
- the *dispatcher* starts a delivery for each message the scheduler lets go: one in flight
  per group, in produce order, up to ``max_in_flight``, and at most ``rate_limit_per_second``;
- a *delivery* pushes through the shared :class:`EndpointSender` and, while it fails, waits
  out the retry schedule (or ``Retry-After``) and tries again **in place**: its group waits
  behind it. A message past its attempts, or refused with a 4xx, is *parked*: retried at the
  schedule's longest delay and reported in ``stats.parked``, never skipped — the durable
  retry levels and the DLQ (the retries issue) replace parking, so nothing is committed past
  a message that has not reached a terminal state;
- the *committer* commits, in batches, the highest position below which every message is
  terminal.

When the segment is sealed and every partition is committed to its end, the runner moves
the subscription's consume pointer to the next segment (by compare-and-set) and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from httpbus.core.audit import AuditEvent, AuditType
from httpbus.core.filters import FilterOutcome, compile_filter
from httpbus.core.model import Segment, SegmentState, Subscription, Topic
from httpbus.core.retry import delay_ms
from httpbus.core.token_bucket import TokenBucket
from httpbus.segments.audit import AuditSink
from httpbus.segments.protocol import Stored
from httpbus.segments.reader import SegmentReader

from .commit import CommitPolicy, CommitTracker
from .groups import GroupScheduler, Outcome
from .result import DeliveryResult
from .sender import Delivery, EndpointSender
from .throttle import Throttle

log = logging.getLogger(__name__)
IDLE_REFRESH_S = 1.0


@dataclass
class RunnerStats:
    delivered: int = 0
    filtered: int = 0
    filter_errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    parked: int = 0
    in_flight: int = 0
    segment: int = 0
    circuit_state: str | None = None  # closed | open | half_open; None: no breaker
    circuit_rate: float | None = None  # attempts a second the circuit allows now


class SubscriptionRunner:
    def __init__(
        self,
        sub: Subscription,
        reader: SegmentReader,
        sender: EndpointSender,
        *,
        audit: AuditSink | None = None,
        commit_policy: CommitPolicy | None = None,
        read_batch: int = 500,
    ) -> None:
        self.sub = sub
        self.reader = reader
        self.sender = sender
        self.audit = audit
        self.read_batch = read_batch
        self.stats = RunnerStats()
        self._filter = compile_filter(sub.filter)
        self._policy = commit_policy or CommitPolicy()
        self._rate = TokenBucket(sub.rate_limit_per_second) if sub.rate_limit_per_second else None
        self._changed = asyncio.Event()  # something became ready, terminal or free
        self._throttle = Throttle.for_subscription(sub, self.stats, audit)  # circuit breaker

    async def run(self) -> None:
        """Deliver until cancelled."""
        while True:
            topic, segment = await self.reader.consume_segment(self.sub)
            self.stats.segment = segment.id
            await _Segment(self, topic, segment).run()
            advanced = await self.reader.try_advance(self.sub)
            if advanced is None:
                await asyncio.sleep(IDLE_REFRESH_S)
            else:
                self.sub = advanced

    def _audit(self, kind: AuditType, msg: Stored, segment: Segment, **extra: object) -> None:
        if self.audit is None:
            return
        headers = dict(msg.headers)
        group = headers.get("x-group-id")
        self.audit.emit(
            AuditEvent(
                type=kind,
                message_id=(headers.get("x-message-id") or b"").decode() or "?",
                project=self.sub.topic_project,
                topic=self.sub.topic,
                subscription=f"{self.sub.project}/{self.sub.name}",
                segment=segment.id,
                partition=msg.partition,
                position=msg.position,
                group=group.decode() if group else None,
                at_ms=int(time.time() * 1000),
                **extra,
            )
        )


class _Segment:
    """The tasks that deliver one segment; :meth:`run` returns once it is finished."""

    def __init__(self, runner: SubscriptionRunner, topic: Topic, segment: Segment) -> None:
        self.r = runner
        self.topic = topic
        self.segment = segment
        self.name = f"{topic.project}/{topic.name}"
        sub = runner.sub
        self.tracker = CommitTracker()
        self.scheduler: GroupScheduler[Stored] = GroupScheduler(
            max_in_flight=sub.max_in_flight, max_buffered=max(1_000, 4 * sub.max_in_flight)
        )
        self.reading = set(range(segment.partitions))
        self.deliveries: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        starts = await self.r.reader.start_positions(self.r.sub, self.segment)
        for partition, position in starts.items():
            self.tracker.start(partition, position)
        tasks = [asyncio.create_task(self._read(p, pos)) for p, pos in starts.items()]
        tasks.append(asyncio.create_task(self._dispatch()))
        committer = asyncio.create_task(self._commit_loop())
        try:
            await asyncio.gather(*tasks[:-1])  # the readers end when the sealed segment is read
            while self.tracker.pending() or self.deliveries:
                await self._wait_change(1.0)
            await self._commit()
        finally:
            for task in [*tasks, committer, *self.deliveries]:
                task.cancel()
            for task in [*tasks, committer, *self.deliveries]:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _wait_change(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self.r._changed.wait()
        self.r._changed.clear()

    # ------------------------------------------------------------ reading
    async def _read(self, partition: int, position: int) -> None:
        last_refresh = time.monotonic()
        while True:
            await self.r._throttle.gate()  # the circuit is open: stop pulling
            batch = await self.r.reader.read(
                self.r.sub,
                self.segment,
                partition,
                position,
                max_records=self.r.read_batch,
                timeout=1.0,
            )
            for msg in batch:
                await self._take(msg)
                position = msg.position + 1
            if batch or time.monotonic() - last_refresh < IDLE_REFRESH_S:
                continue
            last_refresh = time.monotonic()
            if await self._finished(partition, position):
                return

    async def _finished(self, partition: int, position: int) -> bool:
        """Idle: has the segment been sealed, and is this partition read to its end?"""
        fresh = (await self.r.reader.catalog.get_topic(*self.topic_key)).segment(self.segment.id)
        if fresh is None or fresh.state not in (SegmentState.SEALED, SegmentState.RETIRED):
            return False
        self.segment = fresh
        end = (fresh.end_positions or {}).get(partition, 0)
        if position >= end:
            return True
        # Positions need not be dense (Pulsar's end is the next entry): the segment is sealed,
        # so nothing is appended any more, and an empty read says this partition is done.
        rest = await self.r.reader.read(
            self.r.sub, fresh, partition, position, max_records=1, timeout=0.1
        )
        return not rest

    @property
    def topic_key(self) -> tuple[str, str]:
        return self.topic.project, self.topic.name

    async def _take(self, msg: Stored) -> None:
        self.tracker.track(msg.partition, msg.position)
        headers = msg.headers
        named = dict(headers)
        group = named.get("x-group-id")
        content_type = named.get("content-type")
        verdict = self.r._filter.matches(
            headers,
            group=group.decode() if group else None,
            topic=self.name,
            content_type=content_type.decode() if content_type else None,
        )
        if verdict.outcome is not FilterOutcome.MATCH:
            self.r.stats.filtered += 1
            self.r.stats.filter_errors += verdict.outcome is FilterOutcome.ERROR
            self.r._audit(AuditType.FILTERED, msg, self.segment)
            self._terminal(msg)
            return
        key = group.decode() if group is not None else None
        while not self.scheduler.offer(key, msg):  # full: stop reading (back-pressure)
            await self._wait_change(1.0)
        self.r._changed.set()

    # ------------------------------------------------------------ delivering
    async def _dispatch(self) -> None:
        while True:
            await self.r._throttle.gate()  # the circuit is open: start no new delivery
            msg = self.scheduler.next_ready()
            if msg is None:
                await self._wait_change(1.0)
                continue
            if self.r._rate is not None:
                while (wait := self.r._rate.take()) > 0:
                    await asyncio.sleep(wait)
            task = asyncio.create_task(self._deliver(msg))
            self.deliveries.add(task)
            task.add_done_callback(self.deliveries.discard)

    async def _deliver(self, msg: Stored) -> None:
        sub, attempt, parked = self.r.sub, 1, False
        self.r.stats.in_flight += 1
        try:
            while True:
                await self.r._throttle.admit()  # refused while open: waits, costs no attempt
                result = await self.r.sender.send(Delivery(sub, self.name, msg, attempt))
                self.r._throttle.record(result)
                self.r.stats.attempts += 1
                self.r._audit(
                    AuditType.ATTEMPTED, msg, self.segment, attempt=attempt, status=result.status
                )
                if result.succeeded:
                    break
                self.r.stats.failed_attempts += 1
                if not parked and not _may_retry(sub, result, attempt):
                    parked = True
                    self.r.stats.parked += 1
                wait = (
                    sub.retry.max_delay_ms
                    if parked
                    else delay_ms(sub.retry, attempt, result.retry_after)
                )
                await asyncio.sleep(wait / 1000)
                attempt += 1
        finally:
            self.r.stats.in_flight -= 1
            self.r.stats.parked -= parked
        self.r.stats.delivered += 1
        self.r._audit(AuditType.DELIVERED, msg, self.segment, attempt=attempt, status=result.status)
        self.scheduler.completed(msg, Outcome.DONE)
        self._terminal(msg)

    def _terminal(self, msg: Stored) -> None:
        self.tracker.done(msg.partition, msg.position)
        self.r._policy.record()
        self.r._changed.set()

    # ------------------------------------------------------------ committing
    async def _commit_loop(self) -> None:
        while True:
            wait = self.r._policy.wait_s()
            await asyncio.sleep(0.2 if wait is None else max(wait, 0.01))
            if self.r._policy.due():
                await self._commit()

    async def _commit(self) -> None:
        positions = self.tracker.committable_all()
        if positions:
            await self.r.reader.commit(self.r.sub, self.segment, positions)
            self.tracker.mark_all_committed(positions)
        self.r._policy.flushed()


def _may_retry(sub: Subscription, result: DeliveryResult, attempt: int) -> bool:
    retryable = result.retryable or (
        sub.retry.retry_4xx and result.status is not None and 400 <= result.status < 500
    )
    return retryable and attempt < sub.retry.max_attempts

"""One subscription's delivery loop: read → filter → order → push → retry → commit.

A :class:`SubscriptionRunner` delivers its subscription segment by segment, and runs the
subscription's durable retry path (:mod:`.retrypath`) alongside, across segment changes:

- a *reader* task per partition of the consume segment reads from the committed position,
  tracks every message, commits filtered-out messages at once, and hands the rest to the
  retry path's :meth:`~.retrypath.RetryPath.admit` — which queues it for delivery, or routes
  it into a delay level (a delayed message), behind its blocked group (hold topic), or into
  the DLQ behind its sidelined group. Back-pressure: it stops reading while the scheduler
  is full;
- the retry path's readers (delay levels, hold, replay) feed the same scheduler;
- the *dispatcher* starts a delivery for each message the :class:`GroupScheduler` lets go:
  one in flight per group, in order, up to ``max_in_flight``, and at most
  ``rate_limit_per_second``;
- a *delivery* pushes through the shared :class:`EndpointSender`. A failure that must wait
  less than the smallest delay level is retried in place (its group waits behind it); a
  longer wait goes to a delay level (the group's later messages follow it into the hold
  topic); a failure for good goes to the DLQ (see :func:`retryable`);
- the *committer* commits, in batches, per source, the highest position below which every
  message is terminal: delivered, filtered, or durably handed to a level, hold or DLQ.

When the segment is sealed and every partition is committed to its end, the runner moves
the subscription's consume pointer to the next segment (by compare-and-set) and goes on;
the group state lives in the retry path, so it survives the change.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from core.audit import AuditEvent, AuditType
from core.envelope import Envelope
from core.filters import FilterOutcome, compile_filter
from core.model import Segment, SegmentState, Subscription, Topic
from core.result import DeliveryResult
from core.retry import DELIVERED, DeadLetter, RetryInPlace, ToLevel, decide
from core.shards import WHOLE, Shard
from core.token_bucket import TokenBucket
from segments.audit import AuditSink
from segments.internal import RetryMeta
from segments.protocol import Stored
from segments.reader import SegmentReader, commit_group

from .commit import CommitPolicy
from .groups import GroupScheduler, Outcome
from .items import Item, Kind, Source, sleep_until
from .retrypath import RetryPath
from .sender import Delivery, EndpointSender
from .throttle import Throttle

log = logging.getLogger(__name__)
IDLE_REFRESH_S = 1.0
COMMIT_DRAIN_S = 5.0  # how long a stopping runner waits for the commit it has under way


@dataclass
class RunnerStats:
    delivered: int = 0
    filtered: int = 0
    filter_errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    retried: int = 0
    dead_lettered: int = 0
    delayed: int = 0
    in_flight: int = 0
    held: int = 0
    blocked_groups: int = 0
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
        shard: Shard = WHOLE,
    ) -> None:
        self.sub = sub
        self.shard = shard  # the slice of the subscription this runner delivers
        self.reader = reader
        self.sender = sender
        self.audit = audit
        self.read_batch = read_batch
        self.stats = RunnerStats()
        self.name = f"{sub.topic_project}/{sub.topic}"
        self._filter = compile_filter(sub.filter)
        self._policy = commit_policy or CommitPolicy()
        self._rate = TokenBucket(sub.rate_limit_per_second) if sub.rate_limit_per_second else None
        self._changed = asyncio.Event()  # something became ready, terminal or free
        self._throttle = Throttle.for_subscription(sub, self.stats, audit)  # circuit breaker
        self.scheduler: GroupScheduler[Item] = GroupScheduler(
            max_in_flight=sub.max_in_flight, max_buffered=max(1_000, 4 * sub.max_in_flight)
        )
        self.deliveries: set[asyncio.Task[None]] = set()
        self.path: RetryPath | None = None
        self._segment_id = 0
        self._main: Source | None = None
        self._committing: asyncio.Future[None] | None = None

    async def run(self) -> None:
        """Deliver until cancelled."""
        _, segment = await self.reader.consume_segment(self.sub)
        self.path = await RetryPath.open(
            self.sub,
            self.reader.catalog.store,
            dict(self.reader.stores),
            segment.cluster,
            self.offer,
            self._audit_msg,
            self._policy,
            self.shard,
        )
        self.path.start()
        tasks = [asyncio.create_task(self._dispatch()), asyncio.create_task(self._commit_loop())]
        try:
            while True:
                topic, segment = await self.reader.consume_segment(self.sub)
                self.stats.segment = self._segment_id = segment.id
                await _Segment(self, topic, segment).run()
                advanced = await self.reader.try_advance(self.sub)
                if advanced is None:
                    await asyncio.sleep(IDLE_REFRESH_S)
                else:
                    self.sub = advanced
        finally:
            for task in [*tasks, *self.deliveries]:
                task.cancel()
            for task in [*tasks, *self.deliveries]:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await self._drain_commit()
            await self.path.aclose()

    def _audit_msg(self, kind: AuditType, msg: Stored, **extra: object) -> None:
        self._audit(kind, msg, None, **extra)

    def _audit(
        self, kind: AuditType, msg: Stored, segment: Segment | None, **extra: object
    ) -> None:
        if self.audit is None:
            return
        envelope = Envelope.of(msg.headers)
        if segment is not None:  # a record of a retry level carries its hand-off time instead
            extra.setdefault("produced_at_ms", msg.timestamp_ms)
        self.audit.emit(
            AuditEvent(
                type=kind,
                message_id=envelope.message_id or "?",
                project=self.sub.topic_project,
                topic=self.sub.topic,
                subscription=f"{self.sub.project}/{self.sub.name}",
                segment=segment.id if segment is not None else None,
                partition=msg.partition if segment is not None else None,
                position=msg.position if segment is not None else None,
                group=envelope.group or None,
                at_ms=int(time.time() * 1000),
                **extra,
            )
        )

    async def wait_change(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        self._changed.clear()

    # ------------------------------------------------------------ delivering
    async def offer(self, item: Item) -> None:
        """Queue ``item`` behind its group, waiting while the scheduler is full."""
        while not self.scheduler.offer(item.group, item):
            await self.wait_change(1.0)
        self._changed.set()

    async def _dispatch(self) -> None:
        while True:
            await self._throttle.gate()  # the circuit is open: start no new delivery
            item = self.scheduler.next_ready()
            if item is None:
                await self.wait_change(1.0)
                continue
            if self._rate is not None:
                while (wait := self._rate.take()) > 0:
                    await asyncio.sleep(wait)
            task = asyncio.create_task(self._deliver(item))
            self.deliveries.add(task)
            task.add_done_callback(self.deliveries.discard)

    async def _deliver(self, item: Item) -> None:
        sub, policy = self.sub, self.sub.retry
        assert self.path is not None
        self.stats.in_flight += 1
        try:
            await sleep_until(item.not_before_ms)
            attempt = item.meta.attempts + 1
            while True:
                await self._throttle.admit()  # refused while open: waits, costs no attempt
                result = await self.sender.send(Delivery(sub, self.name, item.msg, attempt))
                self._throttle.record(result)
                self.stats.attempts += 1
                self._audit_attempt(item, attempt, result)
                verdict = decide(policy, result, attempt)
                if verdict is DELIVERED:
                    break
                self.stats.failed_attempts += 1
                if isinstance(verdict, DeadLetter):
                    self.stats.dead_lettered += 1
                    self.path.dead_letter(item, result, attempt, self._stop_group(item))
                    return
                if isinstance(verdict, ToLevel):
                    self.stats.retried += 1
                    self.path.retry(item, result, attempt, verdict, self._stop_group(item))
                    return
                assert isinstance(verdict, RetryInPlace)
                await asyncio.sleep(verdict.wait_ms / 1000)  # shorter than every level
                attempt += 1
        finally:
            self.stats.in_flight -= 1
            self._changed.set()
        self.stats.delivered += 1
        self._audit_event(AuditType.DELIVERED, item, attempt=attempt, status=result.status)
        self.scheduler.completed(item, Outcome.DONE)
        self.path.delivered(item)

    def _stop_group(self, item: Item) -> list[Item]:
        """``item`` leaves for a level or the DLQ: free its slot and return the items of its
        group queued behind it (in order), which must follow it."""
        if item.group is None:
            self.scheduler.completed(item, Outcome.DONE)
            return []
        self.scheduler.completed(item, Outcome.BLOCKED)
        drained = self.scheduler.drain(item.group)
        self.scheduler.release(item.group)
        return drained

    def _audit_attempt(self, item: Item, attempt: int, result: DeliveryResult) -> None:
        self._audit_event(
            AuditType.ATTEMPTED, item, attempt=attempt, status=result.status, error=result.error
        )

    def _audit_event(self, kind: AuditType, item: Item, **extra: object) -> None:
        segment = self._main_segment if item.kind is Kind.FRESH else None
        self._audit(kind, item.msg, segment, **extra)

    _main_segment: Segment | None = None

    # ------------------------------------------------------------ committing
    async def _commit_loop(self) -> None:
        while True:
            wait = self._policy.wait_s()
            await asyncio.sleep(0.2 if wait is None else max(wait, 0.01))
            if self._policy.due():
                await self.commit()

    async def commit(self) -> None:
        """Commit what is terminal. The commit runs on even if the caller is cancelled, and a
        stopping runner waits for it (:meth:`_drain_commit`): a commit that reached the
        storage after the next owner had started would move its position back (the storage
        does not order two clients' commits), leaving a lag that nothing commits away."""
        self._committing = asyncio.ensure_future(self._commit_now())
        self._committing.add_done_callback(_retrieved)
        await asyncio.shield(self._committing)

    async def _drain_commit(self) -> None:
        pending = self._committing
        if pending is None or pending.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(pending), COMMIT_DRAIN_S)
        except Exception as exc:  # the storage is away: the next owner commits again
            log.warning("%s: the last commit did not finish: %r", self.name, exc)

    async def _commit_now(self) -> None:
        # A new batch starts before the positions are taken: what becomes terminal while
        # this commit is on the wire waits for the next one. (Starting it after the write
        # left the last messages of a burst uncommitted until more came: the lag that never
        # reached 0 on Pulsar, whose commits are slow REST calls.)
        self._policy.flushed()
        try:
            if self._main is not None:
                await self._main.commit()
            if self.path is not None:
                await self.path.commit()
                self.stats.held = self.path.groups.held()
                self.stats.blocked_groups = len(self.path.groups.blocked_groups)
                self.stats.delayed = self.path.counts["delayed"]
        except BaseException:
            self._policy.record()  # not written: due again at the next round
            raise


def _retrieved(future: asyncio.Future[None]) -> None:
    # Its caller may be gone (cancelled while it ran): the error is the caller's or the
    # drain's to report, never the loop's "exception was never retrieved".
    if not future.cancelled():
        future.exception()


class _Segment:
    """The readers of one consume segment; :meth:`run` returns once it is finished: every
    message read is terminal and committed, and the sealed segment is read to its end."""

    def __init__(self, runner: SubscriptionRunner, topic: Topic, segment: Segment) -> None:
        self.r = runner
        self.topic = topic
        self.segment = segment

    async def run(self) -> None:
        shard = self.r.shard
        starts = await self.r.reader.start_positions(self.r.sub, self.segment, shard)
        store = self.r.reader.store(self.segment)
        group = commit_group(self.r.sub, shard)
        source = Source(store, self.segment.storage_topic, group, starts, self.r._policy)
        self.r._main, self.r._main_segment = source, self.segment
        tasks = [asyncio.create_task(self._read(source, p, pos)) for p, pos in starts.items()]
        try:
            await asyncio.gather(*tasks)  # the readers end when the sealed segment is read
            while source.pending():
                await self.r.wait_change(1.0)
            await self.r.commit()
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def _read(self, source: Source, partition: int, position: int) -> None:
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
                await self._take(source, msg)
                position = msg.position + 1
            if batch or time.monotonic() - last_refresh < IDLE_REFRESH_S:
                continue
            last_refresh = time.monotonic()
            if await self._finished(partition, position):
                return

    async def _finished(self, partition: int, position: int) -> bool:
        """Idle: has the segment been sealed, and is this partition read to its end?"""
        topic = await self.r.reader.catalog.get_topic(self.topic.project, self.topic.name)
        fresh = topic.segment(self.segment.id)
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

    async def _take(self, source: Source, msg: Stored) -> None:
        source.track(msg)
        envelope = Envelope.of(msg.headers)
        group = envelope.group
        if not self.r.shard.owns(group, msg.partition):  # another shard's to deliver
            source.done(msg)
            return
        verdict = self.r._filter.matches(
            msg.headers,
            group=group or None,
            topic=self.r.name,
            content_type=envelope.content_type or None,
        )
        if verdict.outcome is not FilterOutcome.MATCH:
            self.r.stats.filtered += 1
            self.r.stats.filter_errors += verdict.outcome is FilterOutcome.ERROR
            self.r._audit(AuditType.FILTERED, msg, self.segment)
            source.done(msg)
            self.r._changed.set()
            return
        origin = f"{self.segment.id}:{msg.partition}:{msg.position}"
        meta = RetryMeta(origin=origin, topic=self.r.name)
        assert self.r.path is not None
        await self.r.path.admit(Item(msg, source, Kind.FRESH, group, meta))

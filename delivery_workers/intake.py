"""Intake: the messages of one consume segment, read partition by partition from the
committed positions (through :class:`segments.reader.SegmentReader`), checked and admitted.

Each message read is tracked (its position is committed only once it is terminal); one
of another shard, or that the subscription's filter leaves out, is terminal at once; the
rest go to :meth:`.admission.Admission.admit` as fresh items. Reading stops while the
circuit is open (:meth:`.throttle.Throttle.gate`) and while the scheduler is full (the
dispatch's offer waits). :meth:`SegmentIntake.run` returns once the segment is finished:
sealed, read to its end, and every message read is terminal and committed.

Failover (docs/failover.md): a segment left UNSEALED is not finished, so in ``ordered`` mode
the intake waits on it. In ``available`` mode it is left behind: :meth:`SegmentIntake.run`
returns at once without its final commit (its cluster is down; the messages read and not
committed are read again later, at least once), and a *behind* intake
(``behind=True``) reads it to its end once it is sealed, beside the consume segment.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol

from core.audit import AuditType
from core.envelope import GROUP_ID, Envelope, header
from core.filters import Filter, FilterOutcome
from core.model import Segment, Subscription, Topic
from core.shards import Shard
from core.tasks import cancel_all
from segments.external import ExternalStore
from segments.protocol import Stored
from segments.reader import SegmentReader, commit_group, left_behind
from segments.subscription.retry_meta import RetryMeta

from .admission import Admission
from .audit import SubscriptionAudit
from .bodies import BodyCache
from .commit import Committer
from .filter_budget import FilterBudget
from .items import Item, Kind, Source
from .poison import crash_names
from .progress import Progress
from .shared_reads import TopicCache, topic_generation
from .throttle import Throttle

IDLE_REFRESH_S = 1.0
IDLE_WAIT_S = 30.0  # at the end of an open segment: the longest wait for news or a change
SKIPPED = "delivered from the other side of a verified migration before this segment"
SEALING_POLL_S = 0.05  # an external segment being sealed: how often its record is read


class IntakeStats(Protocol):
    filtered: int
    filter_errors: int


class SegmentIntake:
    """The intake of one consume segment (see the module doc)."""

    def __init__(
        self,
        sub: Subscription,
        shard: Shard,
        reader: SegmentReader,
        topic: Topic,
        segment: Segment,
        *,
        matcher: Filter,
        admission: Admission,
        throttle: Throttle,
        progress: Progress,
        committer: Committer,
        audit: SubscriptionAudit,
        stats: IntakeStats,
        read_batch: int,
        poisoned: Mapping[str, str] | None = None,
        budget: FilterBudget | None = None,
        bodies: BodyCache | None = None,
        behind: bool = False,
    ) -> None:
        self.behind = behind  # a segment a failover left behind, read beside the consume one
        self.left = False  # set when a failover left this (consume) segment behind
        self.sub = sub
        self.shard = shard
        self.reader = reader
        self.topic = topic
        self.segment = segment
        self.name = f"{sub.topic_project}/{sub.topic}"
        self.matcher = matcher
        self.admission = admission
        self.throttle = throttle
        self.progress = progress
        self.committer = committer
        self.audit = audit
        self.stats = stats
        self.read_batch = read_batch
        self.poisoned = poisoned or {}
        self.source: Source | None = None  # the consume segment's, once reading started
        self.budget = budget or FilterBudget()
        self.bodies = bodies or BodyCache()  # the worker's, shared by its runners
        self.skip = frozenset(segment.skip_ids)  # a verified migration's (Segment.skip_ids)

    async def run(self) -> None:
        starts = await self.reader.start_positions(self.sub, self.segment, self.shard)
        store = self.reader.store(self.segment)
        group = commit_group(self.sub, self.shard)
        policy = self.committer.policy
        source = Source(store, self.segment.storage_topic, group, starts, policy)
        if self.behind:
            self.committer.behind.append(source)
        else:
            self.source = source
            self.committer.main, self.audit.segment = source, self.segment
        tasks = [asyncio.create_task(self._read(source, p, pos)) for p, pos in starts.items()]
        try:
            await asyncio.gather(*tasks)  # the readers end when the sealed segment is read
            if self.left:  # left behind: nothing more is committed on its cluster now
                self.committer.main = None
                return
            while source.pending():
                await self.progress.wait(1.0)
            await self.committer.settle()  # a failed commit is no reason to restart
        finally:
            if source in self.committer.behind:
                self.committer.behind.remove(source)
            await cancel_all(tasks)

    async def _read(self, source: Source, partition: int, position: int) -> None:
        last_refresh = time.monotonic()
        external = isinstance(self.reader.store(self.segment), ExternalStore)
        throttle = self.throttle
        idle: tuple[int | None] | None = None  # at an open segment's end: (topic generation,)
        while True:
            await throttle.gate()  # the circuit is open: stop pulling
            if idle is None:
                batch = await self.reader.read(
                    self.sub,
                    self.segment,
                    partition,
                    position,
                    max_records=self.read_batch,
                    timeout=1.0,
                )
            else:
                source.waiting_at(partition, position)
                batch = await self._idle_read(partition, position, idle[0])
            source.read_at(partition, position, len(batch))
            if batch and external:
                await self._refresh_external()
            end = self._end(partition)
            for msg in batch:
                if end is not None and msg.position >= end:
                    return  # past a sealed segment's end: an external one, written on
                await self._take(source, msg)
                position = msg.position + 1
            # While messages come, the segment record is looked at again every
            # IDLE_REFRESH_S: an external segment (segments.external) is sealed only
            # logically and its own producers keep writing it, so its reader is never idle
            # at the end. Idle, it is looked at after each wait (_idle_read).
            if (batch or idle is None) and time.monotonic() - last_refresh < IDLE_REFRESH_S:
                continue
            last_refresh = time.monotonic()
            # Before the look: a change after it is told to the wait.
            generation = topic_generation(self.reader.catalog, self.topic.project, self.topic.name)
            if await self._finished(partition, position):
                return
            idle = (generation,) if not batch and not external else None

    async def _idle_read(
        self, partition: int, position: int, generation: int | None
    ) -> list[Stored]:
        """At the end of an open segment: wait for news of the partition (a shared tail
        wakes its waiters only when a fetch brings messages) or a change of the topic (a
        seal, a failover leaving the segment behind: told by the topic's watch), at most
        ``IDLE_WAIT_S``; instead of a read and a look at the topic each second, for each
        of 2 000 idle subscriptions of a worker. The messages read, or none."""
        read = asyncio.ensure_future(
            self.reader.read_news(
                self.sub,
                self.segment,
                partition,
                position,
                max_records=self.read_batch,
                timeout=IDLE_WAIT_S,
            )
        )
        catalog = self.reader.catalog
        if not isinstance(catalog, TopicCache):
            return await read
        changed = asyncio.ensure_future(
            catalog.changed_since(
                self.topic.project, self.topic.name, generation, IDLE_WAIT_S, IDLE_REFRESH_S
            )
        )
        try:
            await asyncio.wait((read, changed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            answered = read.done()
            await cancel_all([changed] if answered else [changed, read])
        return read.result() if answered else []

    async def _refresh_external(self) -> None:
        """An external segment is sealed only logically (segments.external): records past its
        recorded end keep coming. The cutover marks the segment ``sealing`` before it reads
        the ends, so a record read before a look at the segment's record that shows no mark
        lies before them; while the mark is up, what was read is held until the seal shows
        the ends (records past them are never delivered from here)."""
        while not self.segment.finished:
            self.segment = await self.reader.catalog.get_segment(
                self.topic.project, self.topic.name, self.segment.id
            )
            if not self.segment.sealing or self.segment.finished:
                return
            await asyncio.sleep(SEALING_POLL_S)

    def _end(self, partition: int) -> int | None:
        """The recorded end of ``partition`` once the segment is known finished, else None."""
        if not self.segment.finished or self.segment.end_positions is None:
            return None
        return self.segment.end_positions.get(partition, 0)

    async def _finished(self, partition: int, position: int) -> bool:
        """Idle: has the segment been sealed, and is this partition read to its end?"""
        topic = await self.reader.catalog.get_topic(self.topic.project, self.topic.name)
        fresh = topic.segment(self.segment.id)
        if fresh is not None and not self.behind and left_behind(topic, fresh):
            self.left = True
            return True
        if fresh is None or not fresh.finished:  # sealed, with its final ends
            return False
        self.segment = fresh
        end = (fresh.end_positions or {}).get(partition, 0)
        if position >= end:
            return True
        # Positions need not be dense (Pulsar's end is the next entry): the segment is sealed,
        # so nothing is appended any more, and an empty read says this partition is done.
        rest = await self.reader.read(
            self.sub, fresh, partition, position, max_records=1, timeout=0.1
        )
        return not rest

    async def _take(self, source: Source, msg: Stored) -> None:
        source.track(msg)
        origin = f"{self.segment.id}:{msg.partition}:{msg.position}"
        if origin in self.poisoned:
            await self._admit_poisoned(source, msg, origin)
            return
        with crash_names(origin):
            await self._take_one(source, msg, origin)

    async def _admit_poisoned(self, source: Source, msg: Stored, origin: str) -> None:
        """A message the runner failed on again and again: no filter, no envelope, only its
        group; its attempt dead-letters it (:mod:`.poison`)."""
        group = header(msg.headers, GROUP_ID) or None  # the plainest read of it
        await self._admit(source, msg, group, origin)

    async def _take_one(self, source: Source, msg: Stored, origin: str) -> None:
        envelope = Envelope.of(msg.headers)
        if self.skip and envelope.message_id in self.skip:  # delivered from the other side
            self._filtered(source, msg, reason=SKIPPED)
            return
        group = envelope.group
        if not self.shard.owns(group, msg.partition):  # another shard's to deliver
            source.done(msg)
            return
        started = self.budget.timer()  # a body's parse is filter time too
        matcher = self.matcher
        verdict = matcher.matches(
            msg.headers,
            group=group or None,
            topic=self.name,
            content_type=envelope.content_type or None,
            body=self.bodies.body(msg) if matcher.reads_body else None,
        )
        await self.budget.spend(started)  # yields the loop, or sleeps past its share
        if verdict.outcome is not FilterOutcome.MATCH:
            self.stats.filtered += 1
            error = verdict.outcome is FilterOutcome.ERROR
            self.stats.filter_errors += error
            reason = {"reason": verdict.error} if error else {}
            self._filtered(source, msg, **reason)
            return
        await self._admit(source, msg, group, origin)

    def _filtered(self, source: Source, msg: Stored, **reason: object) -> None:
        """``msg`` is terminal without a delivery: audited ``filtered``, done at once."""
        self.audit.message(AuditType.FILTERED, msg, self.segment, **reason)
        source.done(msg)
        self.progress.wake()

    async def _admit(self, source: Source, msg: Stored, group: str | None, origin: str) -> None:
        meta = RetryMeta(origin=origin, topic=self.name)
        await self.admission.admit(Item(msg, source, Kind.FRESH, group, meta))

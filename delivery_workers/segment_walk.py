"""The walk over a subscription's consume segments, one after the other.

:meth:`SegmentWalk.run` takes the consume segment, reads it to its end through a
:class:`~.intake.SegmentIntake`, moves the subscription's consume pointer to the next
segment (by compare-and-set) and goes on. In ``available`` failover mode a segment a
failover left unsealed is passed at once, and :meth:`SegmentWalk.behind` reads it beside the
consume segment once it is sealed (docs/failover.md).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Protocol

from core.errors import HttpbusError
from core.filters import compile_filter
from core.model import Segment, SegmentState, Subscription, Topic
from core.shards import Shard
from core.tasks import first_done
from segments.reader import SegmentReader, left_behind

from .admission import Admission
from .audit import SubscriptionAudit
from .bodies import BodyCache
from .commit import Committer
from .filter_budget import FilterBudget
from .intake import IDLE_REFRESH_S, IntakeStats, SegmentIntake
from .progress import Progress
from .shared_reads import TopicCache, topic_generation
from .throttle import Throttle

log = logging.getLogger(__name__)
BEHIND_S = 1.0  # how often a runner looks for segments a failover left behind
BEHIND_IDLE_S = 30.0  # at most, while none is: changes are told at once (_pause_behind)


class WalkStats(IntakeStats, Protocol):
    segment: int  # the consume segment's id


class SegmentWalk:
    """See the module doc. ``sub`` follows the consume pointer as it moves."""

    def __init__(
        self,
        sub: Subscription,
        shard: Shard,
        reader: SegmentReader,
        *,
        throttle: Throttle,
        progress: Progress,
        audit: SubscriptionAudit,
        stats: WalkStats,
        read_batch: int,
        poisoned: Mapping[str, str],
        bodies: BodyCache,
    ) -> None:
        self.sub = sub
        self.shard = shard
        self.reader = reader
        self.name = f"{sub.topic_project}/{sub.topic}"
        self.throttle = throttle
        self.progress = progress
        self.audit = audit
        self.stats = stats
        self.read_batch = read_batch
        self.poisoned = poisoned
        self.bodies = bodies
        self.intake: SegmentIntake | None = None  # of the consume segment
        self._advanced = asyncio.Event()  # the consume pointer moved (behind() looks again)

    async def run(self, admission: Admission, committer: Committer) -> None:
        """Read the consume segments in turn, for ever."""
        matcher = compile_filter(self.sub.filter)
        budget = FilterBudget()  # over segment changes
        while True:
            topic, segment = await self.reader.consume_segment(self.sub)
            self.stats.segment = segment.id
            if segment.state is SegmentState.UNSEALED and not left_behind(topic, segment):
                # Ordered failover: its cluster may be down, and it cannot be passed before
                # the leader seals it; no storage call meanwhile (a frozen Kafka broker piles
                # up admin requests that librdkafka mishandles when it wakes).
                await asyncio.sleep(IDLE_REFRESH_S)
                continue
            if not left_behind(topic, segment):  # else: read later, by behind()
                intake = self.intake = self._intake(topic, segment, admission, committer)
                intake.matcher, intake.budget = matcher, budget
                await intake.run()
            advanced = await self.reader.try_advance(self.sub)
            if advanced is None:
                await asyncio.sleep(IDLE_REFRESH_S)
            else:
                self.sub = advanced
                self._advanced.set()

    async def behind(self, admission: Admission, committer: Committer) -> None:
        """Read the segments a failover left behind (available mode), each once it is
        sealed, to its end, beside the consume segment; runs for ever."""
        done: set[int] = set()
        generation, found = None, None  # found: what the last round read (None: unknown)
        while True:
            await self._pause_behind(generation, idle=found == [])
            self._advanced.clear()  # before the round: an advance during it is seen after
            generation = topic_generation(
                self.reader.catalog, self.sub.topic_project, self.sub.topic
            )
            found = None
            try:
                found = await self.reader.behind(self.sub, self.shard, done)
                for segment in found:
                    topic, _ = await self.reader.consume_segment(self.sub)
                    log.info("%s: reading segment %s, left behind by a failover", self.name,
                             segment.id)  # fmt: skip
                    intake = self._intake(topic, segment, admission, committer, behind=True)
                    # Not marked done here: an intake also ends on an empty read short of the
                    # end (positions need not be dense), which a slow fetch can give; the
                    # next round's behind() marks it once its commits reach every end.
                    await intake.run()
            except HttpbusError as exc:  # its cluster is away again: the next round retries
                log.warning("%s: reading a segment left behind: %s", self.name, exc)

    async def _pause_behind(self, generation: int | None, *, idle: bool) -> None:
        """A second between rounds while a segment left behind is being read. When the last
        round found none sealed and unread, only a change can bring one: of the topic (a
        failover leaves a segment behind, the leader seals it: told by the topic's watch)
        or of the consume pointer (which a segment must lie behind). Wait for either, at
        most ``BEHIND_IDLE_S``, instead of a look each second by each of 2 000 idle runners."""
        catalog = self.reader.catalog
        if not idle or not isinstance(catalog, TopicCache):
            await asyncio.sleep(BEHIND_S)
            return
        sub = self.sub
        changed = catalog.changed_since(
            sub.topic_project, sub.topic, generation, BEHIND_IDLE_S, BEHIND_S
        )
        await first_done(changed, self._advanced.wait())

    def _intake(
        self,
        topic: Topic,
        segment: Segment,
        admission: Admission,
        committer: Committer,
        *,
        behind: bool = False,
    ) -> SegmentIntake:
        return SegmentIntake(
            self.sub,
            self.shard,
            self.reader,
            topic,
            segment,
            matcher=compile_filter(self.sub.filter),
            admission=admission,
            throttle=self.throttle,
            progress=self.progress,
            committer=committer,
            audit=self.audit,
            stats=self.stats,
            read_batch=self.read_batch,
            poisoned=self.poisoned,
            bodies=self.bodies,
            behind=behind,
        )

"""The segment reader: a subscription's messages, segment by segment, in order.

A subscription reads its consume segment. It moves on to the next segment of the timeline
only when the consume segment is sealed (its end positions recorded) and the subscription
has committed every partition up to those ends; the move is a compare-and-set of the consume
pointer, so two workers never both advance it.

A segment a failover left UNSEALED (docs/failover.md) is not finished: in ``ordered`` mode
the subscription stays on it until the leader has sealed it. In ``available`` mode it is
*left behind* (:func:`left_behind`): the subscription moves on at once, and reads it later,
beside its consume segment, once it is sealed (:meth:`SegmentReader.behind`).
"""

from __future__ import annotations

from collections.abc import Mapping

from core.errors import NotFound
from core.model import FailoverMode, Segment, SegmentState, Subscription, Topic
from core.shards import WHOLE, Shard, shards
from metastore.catalog import Catalog

from .protocol import SegmentStore, Stored, store_of


def commit_group(sub: Subscription, shard: Shard = WHOLE) -> str:
    """The consumer-group / subscription name a subscription (one shard of it) commits
    under, in storage."""
    base = f"httpbus.{sub.project}.{sub.name}"
    return base if shard.whole else f"{base}.shard{shard.index}"


def floor(sub: Subscription, segment: Segment, partition: int) -> int:
    """Where ``sub`` begins in ``partition`` of ``segment`` when it never committed there:
    the segment's own start (a verified migration's, ``Segment.start_of``), or later where the
    subscription's start point lies in this segment (``StartPoint``: created at ``latest`` or
    a time). A committed position always wins over this, so a start is applied only until the
    subscription's first commit."""
    start = sub.start.position(segment.id, partition) if sub.start is not None else 0
    return max(segment.start_of(partition), start)


def left_behind(topic: Topic, segment: Segment) -> bool:
    """Whether subscriptions move past ``segment`` before it is finished: a failover left it
    unsealed and the topic fails over in ``available`` mode."""
    return (
        segment.state is SegmentState.UNSEALED
        and topic.failover is not None
        and topic.failover.mode is FailoverMode.AVAILABLE
    )


class SegmentReader:
    def __init__(self, catalog: Catalog, stores: Mapping[str, SegmentStore]) -> None:
        self.catalog = catalog
        self.stores = stores

    def store(self, segment: Segment) -> SegmentStore:
        return store_of(self.stores, segment.cluster)

    async def consume_segment(self, sub: Subscription) -> tuple[Topic, Segment]:
        topic = await self.catalog.get_topic(sub.topic_project, sub.topic)
        if sub.consume_pointer is None:
            raise NotFound(f"subscription {sub.project}/{sub.name} has no consume pointer")
        segment = topic.segment(sub.consume_pointer.segment_id)
        if segment is None:
            raise NotFound(
                f"segment {sub.consume_pointer.segment_id} of {topic.project}/"
                f"{topic.name} does not exist"
            )
        return topic, segment

    async def start_positions(
        self, sub: Subscription, segment: Segment, shard: Shard = WHOLE
    ) -> dict[int, int]:
        """Where to resume each partition the shard reads: the committed position, else
        :func:`floor` (the segment's or the subscription's start there).

        A start point taken for a partition never committed is committed at once, so status
        shows the subscription's lag from there and every later run resumes from storage."""
        group, store = commit_group(sub, shard), self.store(segment)
        committed = await store.committed(segment.storage_topic, group)
        n = segment.partitions
        starts = {
            p: max(committed[p], segment.start_of(p)) if p in committed else floor(sub, segment, p)
            for p in range(n)
            if shard.reads(p, n)
        }
        began_here = sub.start is not None and sub.start.segment == segment.id
        fresh = {p: pos for p, pos in starts.items() if began_here and p not in committed}
        if fresh:
            await store.commit(segment.storage_topic, group, fresh)
        return starts

    async def read(
        self,
        sub: Subscription,
        segment: Segment,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 1.0,
    ) -> list[Stored]:
        return await self.store(segment).read(
            segment.storage_topic, partition, start, max_records=max_records, timeout=timeout
        )

    async def read_news(
        self,
        sub: Subscription,
        segment: Segment,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 30.0,
    ) -> list[Stored]:
        """A read at the end of what ``partition`` holds that may wait up to ``timeout`` for
        news: here one read of at most a second (a storage read holds a client's reader
        for its wait); a reader that follows tails itself waits the whole ``timeout`` without
        a read of its own (delivery_workers.shared_reads). An empty answer is not an end."""
        return await self.read(
            sub, segment, partition, start, max_records=max_records, timeout=min(timeout, 1.0)
        )

    async def commit(
        self,
        sub: Subscription,
        segment: Segment,
        positions: dict[int, int],
        shard: Shard = WHOLE,
    ) -> None:
        group = commit_group(sub, shard)
        await self.store(segment).commit(segment.storage_topic, group, positions)

    async def try_advance(self, sub: Subscription) -> Subscription | None:
        """Move ``sub`` to the next segment if it has finished its sealed consume segment;
        return the updated subscription, or None if it must stay."""
        topic, segment = await self.consume_segment(sub)
        if left_behind(topic, segment):
            pass  # read later, beside the next segment (behind)
        elif not segment.finished or segment.end_positions is None:
            return None
        elif not await self._finished(sub, segment, segment.end_positions):
            return None
        following = [
            s for s in topic.segments if s.id > segment.id and s.state is not SegmentState.PENDING
        ]
        if not following:
            return None
        await self.catalog.move_consume_pointer(sub, following[0].id)
        return await self.catalog.get_subscription(sub.project, sub.name)

    async def _finished(self, sub: Subscription, segment: Segment, ends: dict[int, int]) -> bool:
        """Whether every shard has committed every partition it reads up to ``ends``: the
        shards that finish first wait for the others (the segment barrier)."""
        store, n = self.store(segment), segment.partitions
        for shard in shards(sub.shards):
            committed = await store.committed(segment.storage_topic, commit_group(sub, shard))
            if any(
                committed.get(p, floor(sub, segment, p)) < end
                for p, end in ends.items()
                if end > 0 and shard.reads(p, n)
            ):
                return False
        return True

    async def behind(
        self, sub: Subscription, shard: Shard = WHOLE, skip: set[int] | None = None
    ) -> list[Segment]:
        """Segments before the consume segment that a failover left behind (``available``
        mode), sealed since, and not read to their ends by ``shard`` yet. ``skip``: ids known
        read to their ends, not asked again (those found so are added to it)."""
        skip = set() if skip is None else skip
        topic, current = await self.consume_segment(sub)
        began = sub.start.segment if sub.start is not None else 0
        out = []
        for segment in topic.segments:
            if (
                segment.id >= current.id
                or segment.id < began  # the subscription began after it
                or segment.id in skip
                or segment.unsealed_at is None
                or segment.state is SegmentState.RETIRED
                or not segment.finished
            ):
                continue
            if await self.drained(sub, segment, shard):
                skip.add(segment.id)
            else:
                out.append(segment)
        return out

    async def drained(self, sub: Subscription, segment: Segment, shard: Shard = WHOLE) -> bool:
        """Whether ``shard`` has committed every partition it reads of a finished segment."""
        ends, n = segment.end_positions or {}, segment.partitions
        committed = await self.store(segment).committed(
            segment.storage_topic, commit_group(sub, shard)
        )
        return all(
            committed.get(p, floor(sub, segment, p)) >= end
            for p, end in ends.items()
            if end > 0 and shard.reads(p, n)
        )

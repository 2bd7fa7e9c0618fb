"""The segment reader: a subscription's messages, segment by segment, in order.

A subscription reads its consume segment. It moves on to the next segment of the timeline
only when the consume segment is sealed (its end positions recorded) and the subscription
has committed every partition up to those ends; the move is a compare-and-set of the consume
pointer, so two workers never both advance it.
"""

from __future__ import annotations

from collections.abc import Mapping

from core.errors import NotFound, StorageUnavailable
from core.model import Segment, SegmentState, Subscription, Topic
from core.shards import WHOLE, Shard, shards
from metastore.catalog import Catalog

from .protocol import SegmentStore, Stored


def commit_group(sub: Subscription, shard: Shard = WHOLE) -> str:
    """The consumer-group / subscription name a subscription (one shard of it) commits
    under, in storage."""
    base = f"httpbus.{sub.project}.{sub.name}"
    return base if shard.whole else f"{base}.shard{shard.index}"


class SegmentReader:
    def __init__(self, catalog: Catalog, stores: Mapping[str, SegmentStore]) -> None:
        self.catalog = catalog
        self.stores = stores

    def store(self, segment: Segment) -> SegmentStore:
        store = self.stores.get(segment.cluster)
        if store is None:
            raise StorageUnavailable(f"storage cluster {segment.cluster!r} is not configured here")
        return store

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
        """Where to resume each partition the shard reads: the committed position, else the
        beginning."""
        group = commit_group(sub, shard)
        committed = await self.store(segment).committed(segment.storage_topic, group)
        n = segment.partitions
        return {p: committed.get(p, 0) for p in range(n) if shard.reads(p, n)}

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
        if not segment.finished or segment.end_positions is None:
            return None
        if not await self._finished(sub, segment, segment.end_positions):
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
                committed.get(p, 0) < end
                for p, end in ends.items()
                if end > 0 and shard.reads(p, n)
            ):
                return False
        return True

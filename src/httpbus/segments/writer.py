"""The segment writer: append to the segment a topic's produce pointer names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from httpbus.core.errors import NotFound, SegmentFenced, StorageUnavailable
from httpbus.core.model import Topic

from .protocol import Record, SegmentStore


@dataclass(frozen=True)
class Written:
    """Where a message was durably stored."""

    segment_id: int
    partition: int
    position: int
    timestamp_ms: int


class SegmentWriter:
    """Writes a topic's messages to its active segment.

    ``refresh`` re-reads a topic (from the metastore, or a watched cache). When the fence of
    a sealed segment refuses a write, the writer refreshes once: if the produce pointer has
    moved, the write goes to the new segment; if not, the refusal stands. Either way no
    message is acknowledged that the old segment's consumers will not see.
    """

    def __init__(
        self, stores: Mapping[str, SegmentStore], refresh: Callable[[str, str], Awaitable[Topic]]
    ) -> None:
        self.stores = stores
        self.refresh = refresh

    def _target(self, topic: Topic) -> tuple[int, str, SegmentStore]:
        segment = topic.active_segment
        if segment is None:
            raise NotFound(f"topic {topic.project}/{topic.name} has no active segment")
        store = self.stores.get(segment.cluster)
        if store is None:
            raise StorageUnavailable(f"storage cluster {segment.cluster!r} is not configured here")
        return segment.id, segment.storage_topic, store

    async def write(self, topic: Topic, record: Record) -> Written:
        segment_id, name, store = self._target(topic)
        try:
            done = await store.produce(name, record)
        except SegmentFenced:
            fresh = await self.refresh(topic.project, topic.name)
            if fresh.produce_pointer is None or fresh.produce_pointer.segment_id == segment_id:
                raise
            segment_id, name, store = self._target(fresh)
            done = await store.produce(name, record)
        return Written(segment_id, done.partition, done.position, done.timestamp_ms)

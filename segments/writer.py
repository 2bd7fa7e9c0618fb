"""The segment writer: append to the segment a topic's produce pointer names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from core.errors import NotFound, SegmentFenced, StorageUnavailable
from core.model import Topic

from .failover.health import WriteHealth, WriteOutcome
from .protocol import Produced, Record, SegmentStore, store_of

T = TypeVar("T")


@dataclass(frozen=True)
class Written:
    """Where a message was durably stored."""

    segment_id: int
    partition: int
    position: int
    timestamp_ms: int


class SegmentWriter:
    """Writes a topic's messages to its active segment (its ``write_segment``: during a
    verified migration's dual write, the shadow segment).

    ``refresh`` re-reads a topic (from the metastore, or a watched cache). When the fence of
    a sealed segment refuses a write, the writer refreshes once: if the produce pointer has
    moved, the write goes to the new segment; if not, the refusal stands. Either way no
    message is acknowledged that the old segment's consumers will not see. A write the store
    knows it never stored (``StorageUnavailable.not_stored``) is written again the same way
    when a failover moved the pointer meanwhile; one that may have been stored never is.

    ``health`` (optional) counts every write's outcome and latency per segment, for the
    failover's detection (``segments.failover.health``).
    """

    def __init__(
        self,
        stores: Mapping[str, SegmentStore],
        refresh: Callable[[str, str], Awaitable[Topic]],
        health: WriteHealth | None = None,
    ) -> None:
        self.stores = stores
        self.refresh = refresh
        self.health = health

    def _target(self, topic: Topic) -> tuple[int, str, SegmentStore]:
        segment = topic.write_segment
        if segment is None:
            raise NotFound(f"topic {topic.project}/{topic.name} has no active segment")
        return segment.id, segment.storage_topic, store_of(self.stores, segment.cluster)

    async def write(self, topic: Topic, record: Record) -> Written:
        segment_id, name, store = self._target(topic)
        try:
            done = await self._produce(topic, segment_id, store, name, record)
        except (SegmentFenced, StorageUnavailable) as exc:
            if isinstance(exc, StorageUnavailable) and not exc.not_stored:
                raise
            fresh = await self.refresh(topic.project, topic.name)
            if not _moved(fresh, segment_id):
                raise
            segment_id, name, store = self._target(fresh)
            done = await self._produce(fresh, segment_id, store, name, record)
        return Written(segment_id, done.partition, done.position, done.timestamp_ms)

    async def _produce(
        self, topic: Topic, segment_id: int, store: SegmentStore, name: str, record: Record
    ) -> Produced:
        return await self._watched(
            topic, segment_id, store.produce(name, record), lambda _: WriteOutcome.OK
        )

    async def _produce_many(
        self, topic: Topic, segment_id: int, store: SegmentStore, name: str, records: list[Record]
    ) -> list[Produced | Exception]:
        return await self._watched(
            topic, segment_id, store.produce_many(name, records), _batch_outcome
        )

    async def _watched(
        self,
        topic: Topic,
        segment_id: int,
        produce: Awaitable[T],
        judge: Callable[[T], WriteOutcome],
    ) -> T:
        """Await ``produce``, telling the write health how it went (``judge`` of its result;
        FAILED if the storage was unavailable; NEUTRAL for any other error)."""
        if self.health is None:
            return await produce
        ticket = self.health.begin((topic.project, topic.name, segment_id))
        outcome = WriteOutcome.NEUTRAL
        try:
            done = await produce
            outcome = judge(done)
            return done
        except StorageUnavailable:
            outcome = WriteOutcome.FAILED
            raise
        finally:
            self.health.end(ticket, outcome)

    async def write_many(
        self, topic: Topic, records: Sequence[Record]
    ) -> list[Written | Exception]:
        """Write many records, a result per record. Records the fence refused are written
        again, in order, to the new segment if the produce pointer moved: the fence refuses
        everything after the seal, so the refused ones are a suffix per key and order holds."""
        segment_id, name, store = self._target(topic)
        results = await self._produce_many(topic, segment_id, store, name, list(records))
        out: list[Written | Exception] = [_written(segment_id, r) for r in results]
        fenced = [i for i, r in enumerate(results) if _again(r)]
        if not fenced:
            return out
        fresh = await self.refresh(topic.project, topic.name)
        if not _moved(fresh, segment_id):
            return out
        segment_id, name, store = self._target(fresh)
        again = await self._produce_many(
            fresh, segment_id, store, name, [records[i] for i in fenced]
        )
        for i, result in zip(fenced, again, strict=True):
            out[i] = _written(segment_id, result)
        return out


def _moved(fresh: Topic, segment_id: int) -> bool:
    """Whether ``fresh`` writes another segment than ``segment_id`` (a cutover or failover
    moved the produce pointer, or a migration's dual write began or ended)."""
    target = fresh.write_segment
    return target is not None and target.id != segment_id


def _again(result: Produced | Exception) -> bool:
    """Whether a failed record may be written to the next segment: refused by a fence, or
    known never stored. A record that may have been stored is not written twice."""
    if isinstance(result, SegmentFenced):
        return True
    return isinstance(result, StorageUnavailable) and result.not_stored


def _batch_outcome(results: list[Produced | Exception]) -> WriteOutcome:
    """A batch counts as one write: ok if any record was stored, failed if the storage
    failed them all, else neutral (refused for their own sake)."""
    if any(not isinstance(r, Exception) for r in results):
        return WriteOutcome.OK
    if results and all(isinstance(r, StorageUnavailable) for r in results):
        return WriteOutcome.FAILED
    return WriteOutcome.NEUTRAL


def _written(segment_id: int, result: Produced | Exception) -> Written | Exception:
    if isinstance(result, Exception):
        return result
    return Written(segment_id, result.partition, result.position, result.timestamp_ms)

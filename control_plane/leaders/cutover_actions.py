"""The side effects of a cutover, each idempotent so a new leader may run it again."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from core.errors import AlreadyExists, NotFound, VersionConflict
from core.model import Backend, Segment, SegmentState, Topic
from metastore.catalog import Catalog
from segments.config import ClusterConfig
from segments.cutover.machine import Cutover
from segments.cutover.records import CutoverRecords
from segments.external import ExternalStore
from segments.failover.records import FailoverRecords
from segments.protocol import Fence, SegmentStore, store_of


@dataclass(frozen=True)
class Begin:
    """Where readers of a verified migration's new segment begin, per partition, and the ids
    the other side delivered already, which they pass over
    (control_plane.leaders.migration_starts)."""

    starts: dict[int, int]
    skip: tuple[str, ...] = ()


# A verified migration's beginning of the new segment, from the cutover, the old and new
# segments and the old one's ends (control_plane.leaders.migration_starts).
StartsHook = Callable[[Cutover, Segment, Segment, dict[int, int]], Awaitable[Begin]]


@dataclass(eq=False)
class CutoverActions:
    """Create / drop the target, fence the old segment, commit the switch, settle its ends."""

    catalog: Catalog
    stores: Mapping[str, SegmentStore]
    records: CutoverRecords
    now: Callable[[], datetime]
    clusters: Mapping[str, ClusterConfig]
    starts: StartsHook | None = None

    def _store(self, cluster: str) -> SegmentStore:
        return store_of(self.stores, cluster)

    async def create_target(self, state: Cutover) -> None:
        """The target storage topic, then its PENDING segment record."""
        topic = await self.catalog.get_topic(state.project, state.topic)
        store = self._store(state.cluster)
        if await store.partitions(state.storage_topic) is None:
            try:
                await store.create_topic(
                    state.storage_topic,
                    state.partitions,
                    retention_ms=topic.retention_hours * 3_600_000,
                )
            except AlreadyExists:
                pass
        if topic.segment(state.to_segment) is not None:
            return
        backend = Backend(self.clusters[state.cluster].backend)
        segment = Segment(
            id=state.to_segment,
            cluster=state.cluster,
            backend=backend,
            storage_topic=state.storage_topic,
            partitions=state.partitions,
            opened_by=f"failover: {state.reason}" if state.failover else None,
        )
        await self.catalog.add_segment(state.project, state.topic, segment)

    async def drop_target(self, state: Cutover) -> None:
        """Delete the target's storage; its PENDING record stays (ids are never reused).
        A migration's switch keeps it: the target is the shadow segment, still dual-written
        (and a rollback's target is the legacy topic, which is never deleted)."""
        if state.migration is not None:
            return
        try:
            await self._store(state.cluster).delete_topic(state.storage_topic)
        except NotFound:
            pass

    async def fence_old(self, state: Cutover) -> Fence:
        """Fence the old segment (no write to it succeeds from now on) and read its ends."""
        old = await self._old(state)
        if old.end_positions is not None:  # the pointer moved already: re-run after a restart
            return Fence(dict(old.end_positions), old.ends_final)
        store = self._store(old.cluster)
        if isinstance(store, ExternalStore) and not old.sealing:
            # Its producers write on past the ends read now: readers hold what they read from
            # here until the seal shows them the ends (delivery_workers.intake), so nothing
            # past them is delivered from this segment. Marked first, then the ends read.
            marked = old.model_copy(update={"sealing": True})
            await self.catalog.update_segment(state.project, state.topic, marked)
        return await store.fence(old.storage_topic)

    async def settle_old(self, state: Cutover, settle_s: float | None) -> dict[int, int]:
        """The old segment's final ends, after the fence's settle (``settle_s``; None: the
        store's strict wait), recorded in its segment record: readers may pass it now."""
        old = await self._old(state)
        if old.ends_final and old.end_positions is not None:
            return dict(old.end_positions)
        ends = await self._store(old.cluster).seal(old.storage_topic, settle_s=settle_s)
        final = old.model_copy(update={"end_positions": ends, "ends_final": True})
        await self.catalog.update_segment(state.project, state.topic, final)
        return ends

    async def _old(self, state: Cutover) -> Segment:
        topic = await self.catalog.get_topic(state.project, state.topic)
        old = topic.segment(state.from_segment)
        if old is None:
            raise NotFound(f"segment {state.from_segment} of {state.project}/{state.topic}")
        return old

    async def _switching(self, state: Cutover, kind: str) -> tuple[Topic, Segment, Segment]:
        """The topic of ``state`` with its old and new segment, before the pointer moved
        (a ``VersionConflict`` after: the document will tell)."""
        topic = await self.catalog.get_topic(state.project, state.topic)
        old, new = topic.segment(state.from_segment), topic.segment(state.to_segment)
        if old is None or new is None:
            raise NotFound(f"a segment of {kind} {state.id} is missing")
        if topic.produce_pointer is not None and topic.produce_pointer.segment_id == new.id:
            raise VersionConflict("the pointer moved already; the document will tell")
        return topic, old, new

    async def move_pointer(
        self, state: Cutover, version: int, ends: dict[int, int], after: Cutover, final: bool
    ) -> None:
        """Old segment SEALED with its ends (``final`` or still to settle), new one ACTIVE
        (with its readers' start positions for a verified migration's switch or rollback),
        pointer moved, and the cutover document at ``after``: one transaction."""
        topic, old, new = await self._switching(state, "cutover")
        sealed = old.model_copy(
            update={
                "state": SegmentState.SEALED,
                "sealed_at": self.now(),
                "end_positions": ends,
                "ends_final": final,
                "sealing": False,
            }
        )
        active = new.model_copy(update={"state": SegmentState.ACTIVE})
        if state.migration is not None and self.starts is not None:
            # Readers begin the new segment where the migration says, from the first read.
            begin = await self.starts(state, old, new, ends)
            update = {"start_positions": begin.starts, "skip_ids": begin.skip}
            active = active.model_copy(update=update)
        await self.catalog.commit_segment_switch(
            topic, sealed, active, extra=[self.records.update_op(after, version)]
        )

    async def leave_unsealed(self, state: Cutover, version: int, after: Cutover) -> None:
        """A failover's commit, one transaction: old segment UNSEALED with the time of the
        switch, new one ACTIVE, pointer moved, the old one marked for the leader to seal
        when its cluster is back, and the cutover document at ``after``."""
        topic, old, new = await self._switching(state, "failover")
        unsealed = old.model_copy(
            update={"state": SegmentState.UNSEALED, "unsealed_at": self.now()}
        )
        active = new.model_copy(update={"state": SegmentState.ACTIVE})
        mark = FailoverRecords.mark_unsealed((state.project, state.topic, old.id))
        await self.catalog.commit_segment_switch(
            topic, unsealed, active, extra=[self.records.update_op(after, version), mark]
        )

"""Where readers begin after a verified migration's switch or rollback (core.migration).

Computed by the leader at the cutover's commit (``CutoverActions.move_pointer`` calls
:class:`MigrationStarts`), from the tails of both sides, and stored as the new segment's
``start_positions`` in the commit's own transaction, so no reader ever sees the new segment
without them.

**Exactly once.** Every id is delivered from one side only. Readers of the new segment pass
over its ``skip_ids`` (``Segment.skip_ids``): the ids the other side delivered already that
lie, or will arrive, at or after the start. Readers of the external segment never deliver
past E: the fence marks it ``sealing`` before it reads E, and readers hold what they read
while the mark is up (``delivery_workers.intake``). The skip list is capped
(:data:`MAX_SKIP_CHARS`, a segment record is a ZooKeeper node); what does not fit is
delivered twice and counted (``switch_duplicates``, ``rollback_duplicates``).

**Switch** (new segment: the shadow one; the external one sealed at E). Per shadow partition,
read its tail (from ``lookback`` before now) and the legacy tail up to E. Readers begin after
the last shadow message whose id the legacy side carried up to E (those were delivered from
the legacy side), but never after a shadow message the legacy side did not carry up to E:
with legacy producers slower than ours a message can sit in the shadow segment before a
matched one while its legacy copy lies after E, and starting past it would lose it. Skipped:
the matched messages at or after the start, and the dual writes in flight at the switch
(recent legacy ids up to E with no shadow copy yet: held by the switch, say, they are stored
after it).

**Rollback** (new segment: the legacy topic again). Per legacy partition, from E: the first
message whose id the shadow segment does not carry (the first loss), else the legacy end at
rollback time. Nothing the legacy side acknowledged is lost. Skipped: the messages after the
first loss that the shadow segment carried, and the recent shadow ids with no legacy copy
after E yet (legacy producers slower than ours write them after the rollback).

The tails are read through the segment stores (the legacy one enveloped by
``segments.external``, so ids are the ones subscriptions see): bounded by ``lookback``
(twice the session gap plus a margin; the legacy tail twice that) for the switch, and for a
rollback by the guard period (the legacy side from E, the shadow side from a lookback before
the switch).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from control_plane.leaders.cutover_actions import Begin
from core import envelope
from core.errors import NotFound
from core.migration import Migration
from core.model import Segment
from metastore.migrations import MigrationRecords
from segments import scan
from segments.cutover.machine import Cutover
from segments.protocol import SegmentStore, store_of

MARGIN_MS = 5_000
MAX_SKIP_CHARS = 300_000  # of a segment's skip_ids: 7 500 ids of 36 characters
READ_TIMEOUT_S = 30.0
Located = list[tuple[int, int, str]]  # (partition, position, id)


async def tail(
    store: SegmentStore,
    seg: Segment,
    since_ms: int,
    ends: Mapping[int, int],
    floors: Mapping[int, int] | None = None,
) -> tuple[Located, dict[int, int]]:
    """The ids of ``seg`` per partition from ``since_ms`` (or its floor, if later) to its
    end, and where each partition's read began."""
    out: Located = []
    began: dict[int, int] = {}
    for p in range(seg.partitions):
        end = ends.get(p, 0)
        at = await store.position_at(seg.storage_topic, p, since_ms)
        began[p] = start = min(max(at, (floors or {}).get(p, 0)), end)
        # Not an empty read for the end (segments.scan): a tail read short would put a
        # reader's start in the wrong place.
        tail_read = scan.read_all(
            store, seg.storage_topic, p, start, end, patience_s=READ_TIMEOUT_S
        )
        for msg in await tail_read:
            out.append((p, msg.position, envelope.header(msg.headers, envelope.MESSAGE_ID) or ""))
    return out, began


def switch_starts(
    shadow: Located, legacy_ids: set[str], floors: Mapping[int, int]
) -> tuple[dict[int, int], set[str]]:
    """Per shadow partition, where readers begin (module doc), and the ids at or after it
    the legacy side delivered already (to skip)."""
    starts: dict[int, int] = {}
    skip: set[str] = set()
    for p, floor in floors.items():
        rows = [(pos, mid) for q, pos, mid in shadow if q == p]
        matched = [pos for pos, mid in rows if mid in legacy_ids]
        start = (max(matched) + 1) if matched else floor
        unmatched = [pos for pos, mid in rows if mid not in legacy_ids and pos < start]
        start = min([start, *unmatched])
        starts[p] = start
        skip |= {mid for pos, mid in rows if pos >= start and mid in legacy_ids}
    return starts, skip


def rollback_starts(
    legacy: Located, bus_ids: set[str], ends: Mapping[int, int]
) -> tuple[dict[int, int], set[str]]:
    """Per legacy partition, where readers begin again (module doc), and the ids at or after
    it the shadow segment delivered already (to skip)."""
    starts: dict[int, int] = {}
    skip: set[str] = set()
    for p, end in ends.items():
        rows = sorted((pos, mid) for q, pos, mid in legacy if q == p)
        start = next((pos for pos, mid in rows if mid not in bus_ids), end)
        starts[p] = start
        skip |= {mid for pos, mid in rows if pos >= start and mid in bus_ids}
    return starts, skip


def capped(ids: set[str]) -> tuple[tuple[str, ...], int]:
    """``ids`` sorted, at most :data:`MAX_SKIP_CHARS` characters of them (a segment record
    is a ZooKeeper node), and how many did not fit: those are delivered twice."""
    kept: list[str] = []
    size = 0
    for mid in sorted(ids):
        size += len(mid) + 3  # as JSON: quotes and a comma
        if size > MAX_SKIP_CHARS:
            break
        kept.append(mid)
    return tuple(kept), len(ids) - len(kept)


class MigrationStarts:
    """The cutover's hook for a migration's switch or rollback (module doc)."""

    def __init__(
        self,
        records: MigrationRecords,
        stores: Mapping[str, SegmentStore],
        now: Callable[[], datetime],
    ) -> None:
        self.records = records
        self.stores = stores
        self.now = now

    def _store(self, seg: Segment) -> SegmentStore:
        return store_of(self.stores, seg.cluster)

    async def __call__(
        self, state: Cutover, old: Segment, new: Segment, ends: dict[int, int]
    ) -> Begin:
        """Where readers begin the new segment and what they skip; the migration records
        both counts."""
        found = await self.records.get(state.project, state.topic)
        if found is None:
            raise NotFound(f"cutover {state.id}: the migration of {state.topic} is gone")
        m = found[0]
        if state.migration == "switch":
            begin, changes = await self._switch(m, old, new, ends)
        else:
            begin, changes = await self._rollback(m, old, new)
        await self.records.change(state.project, state.topic, changes)
        return begin

    def _lookback_ms(self, m: Migration) -> int:
        return 2 * m.session_gap_s * 1000 + MARGIN_MS

    async def _recent(self, store: SegmentStore, seg: Segment, since_ms: int) -> dict[int, int]:
        """Per partition of ``seg``, the first position at or after ``since_ms``."""
        return {
            p: await store.position_at(seg.storage_topic, p, since_ms)
            for p in range(seg.partitions)
        }

    async def _switch(
        self, m: Migration, external: Segment, shadow: Segment, ends: dict[int, int]
    ) -> tuple[Begin, dict[str, Any]]:
        at = self.now()
        since = int(at.timestamp() * 1000) - self._lookback_ms(m)
        # The legacy tail reaches a lookback further back: a shadow message near the start
        # of its tail may have its legacy copy up to a gap earlier.
        legacy_store = self._store(external)
        legacy, _ = await tail(legacy_store, external, since - self._lookback_ms(m), ends)
        shadow_store = self._store(shadow)
        shadow_ends = await shadow_store.end_positions(shadow.storage_topic)
        located, floors = await tail(shadow_store, shadow, since, shadow_ends)
        starts, skip = switch_starts(located, {mid for _, _, mid in legacy}, floors)
        # Dual writes in flight: recent legacy messages up to E whose httpbus copy is not
        # stored yet (held by the switch, say) arrive in the shadow segment after its start
        # (or never: a loss the check reports). Readers skip them too.
        recent = await self._recent(legacy_store, external, since)
        shadow_ids = {mid for _, _, mid in located}
        skip |= {mid for p, pos, mid in legacy if pos >= recent[p]} - shadow_ids
        kept, over = capped(skip)
        changes = {
            "switched_at": at,
            "switch_ends": dict(ends),
            "shadow_starts": starts,
            "switch_skipped": len(kept),
            "switch_duplicates": over,
        }
        return Begin(starts, kept), changes

    async def _rollback(
        self, m: Migration, shadow: Segment, external: Segment
    ) -> tuple[Begin, dict[str, Any]]:
        switched = m.switched_at or self.now()
        since = int(switched.timestamp() * 1000) - self._lookback_ms(m)
        shadow_store = self._store(shadow)
        shadow_ends = await shadow_store.end_positions(shadow.storage_topic)
        bus, _ = await tail(shadow_store, shadow, since, shadow_ends)
        legacy_store = self._store(external)
        ends = await legacy_store.end_positions(external.storage_topic)
        # From E on: what the legacy side carried after the switch.
        legacy, _ = await tail(legacy_store, external, 0, ends, m.switch_ends or {})
        ends = {p: ends.get(p, 0) for p in range(external.partitions)}
        starts, skip = rollback_starts(legacy, {mid for _, _, mid in bus}, ends)
        # Dual writes the other way round: recent shadow messages whose legacy copy is not
        # written yet arrive in the legacy topic after the start. Readers skip them too.
        # (Delivered from the shadow segment: from its start, and not skipped there.)
        recent = await self._recent(shadow_store, shadow, self._ms_ago(self._lookback_ms(m)))
        passed = set(shadow.skip_ids)
        sent = {
            mid
            for p, pos, mid in bus
            if pos >= max(recent[p], shadow.start_of(p)) and mid not in passed
        }
        skip |= sent - {mid for _, _, mid in legacy}
        kept, over = capped(skip)
        changes = {
            "rollback_starts": starts,
            "rollback_skipped": len(kept),
            "rollback_duplicates": over,
        }
        return Begin(starts, kept), changes

    def _ms_ago(self, ms: int) -> int:
        return int(self.now().timestamp() * 1000) - ms

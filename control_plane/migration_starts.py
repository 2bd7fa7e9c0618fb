"""Where readers begin after a verified migration's switch or rollback (core.migration).

Computed by the leader at the cutover's commit (``CutoverActions.move_pointer`` calls
:class:`MigrationStarts`), from the tails of both sides, and stored as the new segment's
``start_positions`` in the commit's own transaction, so no reader ever sees the new segment
without them.

**Switch** (new segment: the shadow one; the external one sealed at E). Per shadow partition,
read its tail (from ``lookback`` before now) and the legacy tail up to E. Readers begin after
the last shadow message whose id the legacy side carried up to E (those were delivered from
the legacy side), but never after a shadow message the legacy side did not carry up to E:
with legacy producers slower than ours a message can sit in the shadow segment before a
matched one while its legacy copy lies after E, and starting past it would lose it. Matched
messages at or after the start are delivered twice, and so are the dual writes in flight at
the switch (legacy copy up to E, httpbus copy stored after the switch): both are counted, the
second as an upper bound (``switch_duplicates``). So are the legacy records written between
the fence (E) and the commit: a worker reading the external segment may deliver them before
it sees the seal (the seal is logical; the time between is this computation), counted as
the legacy ends just before the commit minus E.

**Rollback** (new segment: the legacy topic again). Per legacy partition, from E: the first
message whose id the shadow segment does not carry (the first loss), else the legacy end at
rollback time. Nothing the legacy side acknowledged is lost; the messages after the first
loss that the shadow segment carried are delivered twice and counted
(``rollback_duplicates``).

The tails are read through the segment stores (the legacy one enveloped by
``segments.external``, so ids are the ones subscriptions see): bounded by ``lookback``
(twice the session gap plus a margin; the legacy tail twice that) for the switch, and for a
rollback by the guard period (the legacy side from E, the shadow side from a lookback before
the switch).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from core import envelope
from core.errors import NotFound, StorageUnavailable
from core.migration import Migration
from core.model import Segment
from metastore.migrations import MigrationRecords
from segments.cutover.machine import Cutover
from segments.protocol import SegmentStore, Stored

MARGIN_MS = 5_000
READ_TIMEOUT_S = 30.0
Located = list[tuple[int, int, str]]  # (partition, position, id)


async def read_range(
    store: SegmentStore, name: str, partition: int, start: int, end: int
) -> list[Stored]:
    """Every record of ``[start, end)`` of one partition; ``StorageUnavailable`` if the
    store does not give them within ``READ_TIMEOUT_S``."""
    out: list[Stored] = []
    position, deadline = start, time.monotonic() + READ_TIMEOUT_S
    while position < end:
        if time.monotonic() > deadline:
            raise StorageUnavailable(f"{name}[{partition}] did not give {position}..{end}")
        batch = await store.read(name, partition, position, max_records=1_000, timeout=1.0)
        out.extend(m for m in batch if m.position < end)
        if batch:
            position = batch[-1].position + 1
    return out


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
        for msg in await read_range(store, seg.storage_topic, p, start, end):
            out.append((p, msg.position, envelope.header(msg.headers, envelope.MESSAGE_ID) or ""))
    return out, began


def switch_starts(
    shadow: Located, legacy_ids: set[str], floors: Mapping[int, int]
) -> tuple[dict[int, int], int]:
    """Per shadow partition, where readers begin (module doc), and the duplicates it costs."""
    starts, duplicates = {}, 0
    for p, floor in floors.items():
        rows = [(pos, mid) for q, pos, mid in shadow if q == p]
        matched = [pos for pos, mid in rows if mid in legacy_ids]
        start = (max(matched) + 1) if matched else floor
        unmatched = [pos for pos, mid in rows if mid not in legacy_ids and pos < start]
        start = min([start, *unmatched])
        starts[p] = start
        duplicates += sum(1 for pos, mid in rows if pos >= start and mid in legacy_ids)
    return starts, duplicates


def rollback_starts(
    legacy: Located, bus_ids: set[str], ends: Mapping[int, int]
) -> tuple[dict[int, int], int]:
    """Per legacy partition, where readers begin again (module doc), and the duplicates."""
    starts, duplicates = {}, 0
    for p, end in ends.items():
        rows = sorted((pos, mid) for q, pos, mid in legacy if q == p)
        start = next((pos for pos, mid in rows if mid not in bus_ids), end)
        starts[p] = start
        duplicates += sum(1 for pos, mid in rows if pos >= start and mid in bus_ids)
    return starts, duplicates


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
        store = self.stores.get(seg.cluster)
        if store is None:
            raise StorageUnavailable(f"storage cluster {seg.cluster!r} is not configured here")
        return store

    async def __call__(
        self, state: Cutover, old: Segment, new: Segment, ends: dict[int, int]
    ) -> dict[int, int]:
        """The new segment's start positions; the migration records what they cost."""
        found = await self.records.get(state.project, state.topic)
        if found is None:
            raise NotFound(f"cutover {state.id}: the migration of {state.topic} is gone")
        m = found[0]
        if state.migration == "switch":
            starts, changes = await self._switch(m, old, new, ends)
        else:
            starts, changes = await self._rollback(m, old, new)
        await self.records.change(state.project, state.topic, changes)
        return starts

    def _lookback_ms(self, m: Migration) -> int:
        return 2 * m.session_gap_s * 1000 + MARGIN_MS

    async def _switch(
        self, m: Migration, external: Segment, shadow: Segment, ends: dict[int, int]
    ) -> tuple[dict[int, int], dict[str, Any]]:
        at = self.now()
        since = int(at.timestamp() * 1000) - self._lookback_ms(m)
        # The legacy tail reaches a lookback further back: a shadow message near the start
        # of its tail may have its legacy copy up to a gap earlier.
        legacy_store = self._store(external)
        legacy, _ = await tail(legacy_store, external, since - self._lookback_ms(m), ends)
        shadow_store = self._store(shadow)
        shadow_ends = await shadow_store.end_positions(shadow.storage_topic)
        located, floors = await tail(shadow_store, shadow, since, shadow_ends)
        starts, duplicates = switch_starts(located, {mid for _, _, mid in legacy}, floors)
        # Dual writes in flight: recent legacy messages up to E whose httpbus copy is not
        # stored yet (held by the switch, say) arrive in the shadow segment after its start
        # and are delivered a second time (or never arrive: a loss the check reports).
        recent = {
            p: await legacy_store.position_at(external.storage_topic, p, since)
            for p in range(external.partitions)
        }
        shadow_ids = {mid for _, _, mid in located}
        in_flight = {mid for p, pos, mid in legacy if pos >= recent[p]} - shadow_ids
        duplicates += len(in_flight)
        # Legacy records past E written before the commit: a worker reading the external
        # segment may deliver them before it sees the seal (delivery_workers/reading.py),
        # and their shadow copies again (read last, just before the commit transaction).
        now_ends = await legacy_store.end_positions(external.storage_topic)
        duplicates += sum(max(0, now_ends.get(p, 0) - e) for p, e in ends.items())
        changes = {
            "switched_at": at,
            "switch_ends": dict(ends),
            "shadow_starts": starts,
            "switch_duplicates": duplicates,
        }
        return starts, changes

    async def _rollback(
        self, m: Migration, shadow: Segment, external: Segment
    ) -> tuple[dict[int, int], dict[str, Any]]:
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
        starts, duplicates = rollback_starts(legacy, {mid for _, _, mid in bus}, ends)
        return starts, {"rollback_starts": starts, "rollback_duplicates": duplicates}

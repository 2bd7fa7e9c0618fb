"""The leader's part of verified migrations (core.migration): switch, roll back, complete.

The process elected to the role ``migration`` runs a :class:`MigrationMonitor`. Every
``interval_s`` it reads each migration still marked active and does what
:func:`core.migration.next_move` decides from the windows the check stored: start the switch
(a cutover onto the shadow segment), start a rollback (a cutover onto a new external segment
of the same legacy topic), or complete the migration; and it follows the cutover it started
to its end. It starts cutovers through the :class:`~control_plane.services.cutovers.Cutovers`
facade and follows them in their records; the cutover coordinator drives them. The leader
decides rather than the check job because the check only produces facts (windows), may run
anywhere (a Spark cluster) and more than once, while the leader is one process at a time
that survives a job's crash; the decision is one pure function over the stored document
either way.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from control_plane.leaders.context import ContextRole, LeaderContext
from control_plane.leaders.election import rest
from core.errors import CutoverInProgress, HttpbusError, NotFound
from core.migration import Migration, MigrationState, Move, dirty_in_guard, next_move
from core.model import Segment
from metastore.migrations import MigrationRecords
from segments.cutover.machine import UNDONE, Cutover

log = logging.getLogger(__name__)
ROLE = "migration"


class MigrationMonitor(ContextRole):
    """Drive every active migration (module doc)."""

    def __init__(self, context: LeaderContext, *, interval_s: float = 0.5) -> None:
        super().__init__(context, ROLE)
        self.records = MigrationRecords(context.metastore)
        self.interval_s = interval_s

    async def lead(self, lost: asyncio.Event) -> None:
        while not lost.is_set():
            for project, topic in await self._active():
                try:
                    await self.drive_once(project, topic)
                except HttpbusError as exc:
                    log.warning("migration of %s/%s: %s; retrying", project, topic, exc)
            await rest(lost, self.interval_s)

    async def _active(self) -> list[tuple[str, str]]:
        try:
            return await self.records.active()
        except HttpbusError as exc:
            log.warning("reading the active migrations: %s", exc)
            return []

    async def drive_once(self, project: str, topic: str) -> None:
        """One round for one migration."""
        found = await self.records.get(project, topic)
        if found is None or found[0].finished:
            await self.records.finish(project, topic)
            return
        m = found[0]
        if m.state in (MigrationState.SWITCHING, MigrationState.ROLLING_BACK):
            await self._follow(m)
            return
        move = next_move(m)
        if move is Move.SWITCH:
            await self._switch(m)
        elif move is Move.ROLLBACK:
            await self._rollback(m)
        elif move is Move.COMPLETE:
            await self._end(m, {"state": MigrationState.COMPLETED})
            log.info("migration %s of %s/%s completed", m.id, project, topic)

    async def _change(self, m: Migration, changes: dict[str, Any]) -> Migration:
        changes = {"updated_at": self.cutovers.now(), **changes}
        return await self.records.change(m.project, m.topic, changes)

    async def _end(self, m: Migration, changes: dict[str, Any]) -> None:
        await self._change(m, {"finished_at": self.cutovers.now(), **changes})
        await self.records.finish(m.project, m.topic)

    async def _switch(self, m: Migration) -> None:
        topic = await self.cutovers.catalog.get_topic(m.project, m.topic)
        shadow = topic.segment(m.shadow_segment)
        if shadow is None:
            raise NotFound(f"segment {m.shadow_segment} of {m.project}/{m.topic}")
        if topic.produce_pointer is not None and topic.produce_pointer.segment_id == shadow.id:
            # A leader died between starting the switch and recording it: it committed.
            await self._change(m, {"state": MigrationState.GUARD})
            return
        cutover = await self._start(m, shadow, (shadow.id, shadow.storage_topic), "switch")
        if cutover is None:
            return
        log.info("migration %s of %s/%s: %s clean windows, switching (cutover %s)",
                 m.id, m.project, m.topic, m.streak, cutover.id)  # fmt: skip
        await self._change(m, {"state": MigrationState.SWITCHING, "cutover_id": cutover.id})

    async def _rollback(self, m: Migration) -> None:
        topic = await self.cutovers.catalog.get_topic(m.project, m.topic)
        external = topic.segment(m.external_segment)
        if external is None:
            raise NotFound(f"segment {m.external_segment} of {m.project}/{m.topic}")
        target, _ = await self.cutovers.next_segment(topic)
        cutover = await self._start(m, external, (target, external.storage_topic), "rollback")
        if cutover is None:
            return
        dirty = dirty_in_guard(m)
        reason = None if dirty is None else _why(dirty.start_ms, dirty.missing_in_bus_ids)
        log.warning("migration %s of %s/%s: rolling back (cutover %s): %s",
                    m.id, m.project, m.topic, cutover.id, reason)  # fmt: skip
        await self._change(
            m,
            {
                "state": MigrationState.ROLLING_BACK,
                "cutover_id": cutover.id,
                "rollback_segment": target,
                "reason": reason,
            },
        )

    async def _start(
        self, m: Migration, like: Segment, onto: tuple[int, str], kind: str
    ) -> Cutover | None:
        """The ``kind`` (switch, rollback) cutover onto segment ``onto`` (id, storage topic)
        on ``like``'s cluster and partition count; None while another cutover runs."""
        try:
            return await self.cutovers.start(
                m.project, m.topic, like.cluster, like.partitions, migration=kind, onto=onto
            )
        except CutoverInProgress as exc:
            log.info("migration %s waits to %s: %s", m.id, kind, exc)
            return None

    async def _follow(self, m: Migration) -> None:
        """Follow the switch's or rollback's cutover to its end."""
        found = await self.cutovers.records.get(m.project, m.topic)
        if found is None or found[0].id != m.cutover_id:
            raise NotFound(f"cutover {m.cutover_id} of migration {m.id} is gone")
        cutover = found[0]
        switching = m.state is MigrationState.SWITCHING
        if cutover.pointer_moved:
            if switching:
                await self._change(m, {"state": MigrationState.GUARD})
                log.info("migration %s of %s/%s switched", m.id, m.project, m.topic)
            else:
                await self._end(m, {"state": MigrationState.ROLLED_BACK})
                log.warning("migration %s of %s/%s rolled back", m.id, m.project, m.topic)
        elif cutover.phase in UNDONE:
            back = MigrationState.DUAL_WRITE if switching else MigrationState.GUARD
            why = f"cutover {cutover.id} ended {cutover.phase}: {cutover.error or 'no reason'}"
            await self._change(m, {"state": back, "cutover_id": None, "reason": why})


def _why(start_ms: int, missing: list[str]) -> str:
    shown = ", ".join(missing[:5]) or "late or bus-only ids"
    return f"window from {start_ms} is dirty within the guard period (missing in bus: {shown})"

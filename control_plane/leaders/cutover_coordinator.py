"""The cutover coordinator: the control plane's side of the protocol of ``segments.cutover``.

Any control plane may *start* or *abort* a cutover
(:class:`control_plane.services.cutovers.Cutovers`): that is a compare-and-set on the topic's
cutover document. Only the elected leader (``/leader/cutover``, a role of its own)
*drives* them (:class:`CutoverCoordinator`): for every active
cutover it feeds the state machine with the live producers (ephemeral members of
``producers``), their acknowledgements (read from the document, which it watches) and the
clock, persists each new state before it acts, and runs the actions: create the target
storage topic and its PENDING segment; seal and fence the old segment; in one metastore
transaction record the old segment SEALED with its end positions, make the new one ACTIVE,
move the produce pointer and mark the document committed; drop the target after a rollback.

Each loop starts as if the coordinator had just taken over (``Restarted``): the persisted
state alone decides what is re-run, and every action is idempotent, so a leader that dies
between any two steps is replaced by one that resumes (before COMMIT, until the phase
deadline rolls it back) or finishes the commit (after it).

Failovers (:mod:`.failover`), verified migrations (:mod:`.migration_monitor`) and the
retirement of segments (:mod:`.retirement`) are roles of their own: they start cutovers
through the same facade, and this leader drives them like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from control_plane.leaders.context import ContextRole, LeaderContext
from control_plane.leaders.cutover_actions import CutoverActions
from control_plane.leaders.election import rest
from control_plane.leaders.migration_starts import MigrationStarts
from control_plane.services.cutovers import PRODUCERS
from core.errors import (
    AlreadyExists,
    HttpbusError,
    NotFound,
    StorageUnavailable,
    ValidationFailed,
    VersionConflict,
)
from core.tasks import cancel
from segments.cutover.machine import TERMINAL as TERMINAL_PHASES
from segments.cutover.machine import (
    Action,
    Cleaned,
    Clock,
    CreateTarget,
    Cutover,
    DropTarget,
    EndsSettled,
    Event,
    Failed,
    LeaveUnsealed,
    MovePointer,
    Outcome,
    PointerMoved,
    Restarted,
    Sealed,
    SealOld,
    SettleEnds,
    TargetReady,
    cleanup,
    seal_settle,
    step,
)

log = logging.getLogger(__name__)

ROLE = "cutover"
_APPLY_RETRIES = 5


class CutoverCoordinator(ContextRole):
    """The leader that drives every active cutover (see the module doc)."""

    def __init__(
        self,
        context: LeaderContext,
        *,
        interval_s: float = 0.2,
    ) -> None:
        super().__init__(context, ROLE)
        cutovers, stores = context.cutovers, context.stores
        self.records = cutovers.records
        starts = MigrationStarts(cutovers.migrations, stores, cutovers.now)
        self.actions = CutoverActions(
            cutovers.catalog, stores, cutovers.records, cutovers.now, cutovers.clusters, starts
        )
        self.interval_s = interval_s
        self._drivers: dict[tuple[str, str], asyncio.Task[None]] = {}

    @property
    def driving(self) -> int:
        """The cutovers this coordinator drives now."""
        return sum(1 for task in self._drivers.values() if not task.done())

    def figures(self) -> dict[str, Any]:
        return {"cutovers_active": self.driving}

    async def lead(self, lost: asyncio.Event) -> None:
        """Drive every active cutover until the leadership is lost."""
        try:
            while not lost.is_set():
                for key in await self.records.active():
                    task = self._drivers.get(key)
                    if task is None or task.done():
                        self._drivers[key] = asyncio.create_task(self._drive(*key))
                await rest(lost, self.interval_s * 5)
        finally:
            drivers, self._drivers = list(self._drivers.values()), {}
            for task in drivers:
                task.cancel()
            await asyncio.gather(*drivers, return_exceptions=True)

    async def _drive(self, project: str, topic: str) -> None:
        changed = asyncio.Event()
        watcher = asyncio.create_task(self._watch(project, topic, changed))
        try:
            while True:
                changed.clear()
                try:
                    if await self.drive_once(project, topic):
                        return
                except HttpbusError as exc:
                    log.warning("cutover of %s/%s: %s; retrying", project, topic, exc)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.interval_s):
                        await changed.wait()
        finally:
            await cancel(watcher)

    async def _watch(self, project: str, topic: str, changed: asyncio.Event) -> None:
        async for _ in self.records.watch(project, topic):
            changed.set()

    async def drive_once(self, project: str, topic: str) -> bool:
        """One round: reconcile, advance, act. True once the cutover needs nothing more."""
        found = await self.records.get(project, topic)
        if found is None:
            await self.records.finish(project, topic)
            return True
        state, version = found
        live = frozenset(await self.cutovers.metastore.members(PRODUCERS))
        out = step(state, Restarted(live), self._clock())
        state, version = await self._persist(state, out.state, version)
        pending = list(out.actions)
        while pending:  # an action's result may call for the next one (seal → move)
            action = pending.pop(0)
            event = await self._act(state, version, action)
            if event is None:
                break  # failed for now: the next round re-runs it
            if isinstance(event, PointerMoved):  # the commit transaction wrote the document
                return False
            nxt, state, version = await self._apply(state, version, event)
            pending.extend(nxt.actions)
        if state.phase in TERMINAL_PHASES and (state.cleaned or not cleanup(state)):
            await self.records.finish(project, topic)
            return True
        return False

    async def _apply(
        self, state: Cutover, version: int, event: Event
    ) -> tuple[Outcome, Cutover, int]:
        """Step ``state`` with an action's ``event`` and persist it. The final ends settle
        while producers acknowledge the commit on the same document: on a conflict the event
        (a fact) is applied again to the document as it is now."""
        for _ in range(_APPLY_RETRIES):
            nxt = step(state, event, self._clock())
            try:
                state, version = await self._persist(state, nxt.state, version)
                return nxt, state, version
            except VersionConflict:
                found = await self.records.get(state.project, state.topic)
                if found is None or found[0].id != state.id:
                    raise
                state, version = found
        raise VersionConflict(f"cutover {state.id}: the document kept changing")

    async def _persist(self, old: Cutover, new: Cutover, version: int) -> tuple[Cutover, int]:
        if new == old:
            return old, version
        if new.phase != old.phase:
            log.info("cutover %s of %s/%s: %s", new.id, new.project, new.topic, new.phase)
        return new, await self.records.put(new, version)

    async def _act(self, state: Cutover, version: int, action: Action) -> Event | None:
        try:
            if isinstance(action, CreateTarget):
                await self.actions.create_target(state)
                return TargetReady()
            if isinstance(action, DropTarget):
                await self.actions.drop_target(state)
                return Cleaned()
            if isinstance(action, SealOld):
                t0 = time.perf_counter()
                live = await self.cutovers.metastore.members(PRODUCERS)
                settle = seal_settle(state, live, self.cutovers.timeouts)
                fence = await self.actions.fence_old(state)
                log.info("cutover %s: fenced segment %s in %.0f ms (ends %s)", state.id,
                         state.from_segment, 1000 * (time.perf_counter() - t0),
                         "final" if fence.final else "to settle")  # fmt: skip
                return Sealed(fence.ends, fence.final, settle)
            if isinstance(action, SettleEnds):
                t0, settle = time.perf_counter(), action.settle_s
                ends = await self.actions.settle_old(state, settle)
                log.info("cutover %s: final ends of segment %s recorded in %.0f ms (settle %s)",
                         state.id, state.from_segment, 1000 * (time.perf_counter() - t0),
                         "strict" if settle is None else f"{settle}s")  # fmt: skip
                return EndsSettled(ends)
            if isinstance(action, LeaveUnsealed):
                t0 = time.perf_counter()
                after = step(state, PointerMoved(), self._clock()).state
                await self.actions.leave_unsealed(state, version, after)
                log.warning("failover %s of %s/%s: produce pointer moved to %s in %.0f ms, "
                            "segment %s left unsealed (%s)", state.id, state.project,
                            state.topic, state.to_segment, 1000 * (time.perf_counter() - t0),
                            state.from_segment, state.reason)  # fmt: skip
                return PointerMoved()
            if isinstance(action, MovePointer):
                t0 = time.perf_counter()
                after = step(state, PointerMoved(), self._clock()).state
                await self.actions.move_pointer(state, version, action.ends, after, action.final)
                log.info("cutover %s: produce pointer moved to %s in %.0f ms", state.id,
                         state.to_segment, 1000 * (time.perf_counter() - t0))  # fmt: skip
                return PointerMoved()
        except (StorageUnavailable, VersionConflict) as exc:
            log.warning("cutover %s: %s failed: %s", state.id, type(action).__name__, exc)
            return None
        except (AlreadyExists, NotFound, ValidationFailed) as exc:
            if isinstance(action, CreateTarget):
                return Failed(f"cannot create the target segment: {exc}")
            raise
        return None

    def _clock(self) -> Clock:
        return Clock(self.cutovers.now(), self.cutovers.timeouts)

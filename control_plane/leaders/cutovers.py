"""The cutover coordinator: the control plane's side of the protocol of ``segments.cutover``.

Any control plane may *start* or *abort* a cutover (:class:`Cutovers`): that is a
compare-and-set on the topic's cutover document. Only the elected leader (``/leader/cutover``,
elected like the assigner) *drives* them (:class:`CutoverCoordinator`): for every active
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

The same leader retires segments no subscription needs (``retire``), every
``retire_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime

from control_plane.leaders.cutover_actions import CutoverActions
from control_plane.leaders.election import LeaderElection, rest
from control_plane.leaders.failover import FailoverMonitor
from control_plane.leaders.migration_monitor import MigrationMonitor
from control_plane.leaders.migration_starts import MigrationStarts
from control_plane.leaders.retirement import retire_segments
from control_plane.settings import ControlPlaneSettings
from core.errors import (
    AlreadyExists,
    CutoverCommitted,
    HttpbusError,
    MigrationInProgress,
    NotFound,
    StorageUnavailable,
    ValidationFailed,
    VersionConflict,
)
from core.model import SegmentState, Topic
from metastore.catalog import Catalog
from metastore.migrations import MigrationRecords
from metastore.protocol import MetaStore
from segments.audit import AuditSink
from segments.config import ClusterConfig
from segments.cutover.machine import TERMINAL as TERMINAL_PHASES
from segments.cutover.machine import (
    AbortRequested,
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
    Timeouts,
    begin,
    cleanup,
    seal_settle,
    step,
)
from segments.cutover.records import CutoverRecords
from segments.failover.health import Detection, HealthJudge
from segments.protocol import SegmentStore

log = logging.getLogger(__name__)

PRODUCERS = "producers"
ROLE = "cutover"
_APPLY_RETRIES = 5


def utcnow() -> datetime:
    return datetime.now(UTC)


class Cutovers:
    """Start, read and abort cutovers (any control plane; the leader drives them)."""

    def __init__(
        self,
        metastore: MetaStore,
        catalog: Catalog,
        clusters: dict[str, ClusterConfig],
        timeouts: Timeouts,
        prefix: str,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.metastore = metastore
        self.catalog = catalog
        self.records = CutoverRecords(metastore)
        self.migrations = MigrationRecords(metastore)
        self.coordinator: CutoverCoordinator | None = None  # this process's, once started
        self.clusters = clusters
        self.timeouts = timeouts
        self.prefix = prefix
        self.now = now

    async def start(
        self,
        project: str,
        topic: str,
        cluster: str,
        partitions: int,
        *,
        failover: str | None = None,
        from_segment: int | None = None,
        migration: str | None = None,
        onto: tuple[int, str] | None = None,
    ) -> Cutover:
        """Begin a cutover of ``project/topic`` to a fresh segment on ``cluster``; with
        ``failover`` (its reason), an emergency one of segment ``from_segment`` (a
        ``VersionConflict`` if the pointer left it meanwhile). A verified migration's
        ``switch`` or ``rollback`` (``migration``) names its new segment's id and storage
        topic (``onto``: the shadow segment, or the legacy topic again)."""
        if cluster not in self.clusters:
            raise ValidationFailed(
                f"cluster: unknown storage cluster {cluster!r}; configured: "
                f"{', '.join(sorted(self.clusters))}",
                details={"fields": [{"field": "cluster", "problem": "unknown cluster"}]},
            )
        found = await self.catalog.get_topic(project, topic)
        if found.produce_pointer is None:
            raise NotFound(f"topic {project}/{topic} has no active segment")
        if from_segment is not None and found.produce_pointer.segment_id != from_segment:
            raise VersionConflict(f"{project}/{topic} no longer writes segment {from_segment}")
        if migration is None:
            await self.check_no_migration(project, topic)
        target, storage = onto or await self.next_segment(found)
        live = await self.metastore.members(PRODUCERS)
        out = begin(
            uuid.uuid4().hex[:12],
            project,
            topic,
            found.produce_pointer.segment_id,
            target,
            cluster,
            partitions,
            storage,
            live=live,
            clock=Clock(self.now(), self.timeouts),
            failover=failover,
            migration=migration,
        )
        await self.records.create(out.state, found.version)
        return out.state

    async def next_segment(self, found: Topic) -> tuple[int, str]:
        """A new segment id of ``found`` and a fresh storage topic name for it. An id is
        never reused, not even that of a cutover aborted before its segment existed."""
        last = await self.records.get(found.project, found.name)
        target = max([s.id for s in found.segments] + [last[0].to_segment if last else 0]) + 1
        storage = f"{self.prefix}.{found.project}.{found.name}.s{target}.{uuid.uuid4().hex[:8]}"
        return target, storage

    async def check_no_migration(self, project: str, topic: str) -> None:
        """A cutover of a topic in a verified migration's dual write is refused: the
        migration's own switch moves it (core.migration)."""
        found = await self.migrations.get(project, topic)
        if found is not None and not found[0].finished:
            raise MigrationInProgress(
                f"topic {project}/{topic} is in migration {found[0].id} ({found[0].state}): "
                "abandon it before a cutover"
            )

    async def get(self, project: str, topic: str) -> Cutover:
        found = await self.records.get(project, topic)
        if found is None:
            await self.catalog.get_topic(project, topic)  # 404 names the topic if it is absent
            raise NotFound(f"topic {project}/{topic} has had no cutover")
        return found[0]

    async def abort(self, project: str, topic: str) -> Cutover:
        """Abort before COMMIT (409 after); the leader then drops the target."""
        while True:
            found = await self.records.get(project, topic)
            if found is None:
                raise NotFound(f"topic {project}/{topic} has had no cutover")
            state, version = found
            if state.phase in TERMINAL_PHASES and state.phase.value != "COMPLETE":
                return state
            out = step(state, AbortRequested(), Clock(self.now(), self.timeouts))
            if out.refused is not None:
                raise CutoverCommitted(f"cutover {state.id} of {project}/{topic}: {out.refused}")
            try:
                await self.records.put(out.state, version)
            except VersionConflict:
                continue
            return out.state


class CutoverCoordinator(LeaderElection):
    """The leader that drives every active cutover (see the module doc)."""

    def __init__(
        self,
        cutovers: Cutovers,
        stores: dict[str, SegmentStore],
        member_id: str,
        *,
        interval_s: float = 0.2,
        retire_interval_s: float = 300.0,
        monitor: FailoverMonitor | None = None,
        migrations: MigrationMonitor | None = None,
    ) -> None:
        super().__init__(cutovers.metastore, ROLE, member_id)
        self.monitor = monitor  # automatic failover, run while this process leads
        self.migrations = migrations  # verified migrations' switch and rollback, likewise
        self.cutovers = cutovers
        self.records = cutovers.records
        starts = MigrationStarts(cutovers.migrations, stores, cutovers.now)
        self.actions = CutoverActions(
            cutovers.catalog, stores, cutovers.records, cutovers.now, cutovers.clusters, starts
        )
        self.interval_s = interval_s
        self.retire_interval_s = retire_interval_s
        self._stores = stores
        self._drivers: dict[tuple[str, str], asyncio.Task[None]] = {}

    @property
    def driving(self) -> int:
        """The cutovers this coordinator drives now."""
        return sum(1 for task in self._drivers.values() if not task.done())

    async def lead(self, lost: asyncio.Event) -> None:
        """Drive every active cutover until the leadership is lost."""
        next_retire = 0.0
        monitors = [m for m in (self.monitor, self.migrations) if m is not None]
        watching = [asyncio.create_task(m.run(lost)) for m in monitors]
        try:
            while not lost.is_set():
                if time.monotonic() >= next_retire:
                    next_retire = time.monotonic() + self.retire_interval_s
                    try:
                        await retire_segments(
                            self.cutovers.catalog, self._stores, self.cutovers.now()
                        )
                    except HttpbusError as exc:  # retiring waits; cutovers must not
                        log.warning("retiring segments: %s", exc)
                for key in await self.records.active():
                    task = self._drivers.get(key)
                    if task is None or task.done():
                        self._drivers[key] = asyncio.create_task(self._drive(*key))
                await rest(lost, self.interval_s * 5)
        finally:
            drivers, self._drivers = list(self._drivers.values()), {}
            drivers.extend(watching)
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
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

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


__all__ = ["CutoverCoordinator", "Cutovers", "SegmentState"]


async def open_cutovers(
    stack: AsyncExitStack,
    metastore: MetaStore,
    stores: dict[str, SegmentStore],
    settings: ControlPlaneSettings,
) -> Cutovers:
    """The control plane's cutovers, and its coordinator standing for election (closed with
    ``stack``)."""
    timeouts = Timeouts(
        prepare_s=settings.cutover_prepare_timeout_s,
        switch_s=settings.cutover_switch_timeout_s,
        complete_s=settings.cutover_complete_timeout_s,
        settle_s=settings.cutover_settle_s,
        failover_phase_s=settings.failover_phase_timeout_s,
    )
    cutovers = Cutovers(
        metastore,
        Catalog(metastore),
        settings.clusters,
        timeouts,
        settings.storage_topic_prefix,
    )
    detection = Detection(
        fail_after_s=settings.failover_after_s,
        latency_p99_ms=settings.failover_latency_p99_ms,
        latency_for_s=settings.failover_latency_for_s,
    )
    monitor = FailoverMonitor(
        cutovers,
        stores,
        HealthJudge(detection),
        interval_s=settings.failover_check_interval_s,
        seal_retry_s=settings.failover_seal_retry_s,
        audit=_audit_sink(stack, stores, settings),
    )
    coordinator = CutoverCoordinator(
        cutovers,
        stores,
        settings.member_id,
        retire_interval_s=settings.segment_retire_interval_s,
        monitor=monitor,
        migrations=MigrationMonitor(cutovers),
    )
    await stack.enter_async_context(coordinator)
    cutovers.coordinator = coordinator
    return cutovers


def _audit_sink(
    stack: AsyncExitStack, stores: dict[str, SegmentStore], settings: ControlPlaneSettings
) -> Callable[[], Awaitable[AuditSink | None]]:
    """Where failovers are audited: the audit topic, opened (and created if missing) at the
    first failover, not at start; None if its cluster is not reachable then (a failover is
    then only logged and counted)."""
    opened: list[AuditSink] = []

    async def sink() -> AuditSink | None:
        if opened:
            return opened[0]
        cluster = settings.audit.cluster or settings.default_cluster
        store = stores.get(cluster)
        if store is None:
            return None
        new = AuditSink(store, settings.audit.topic, partitions=settings.audit.partitions)
        try:
            opened.append(await stack.enter_async_context(new))
        except HttpbusError as exc:
            log.warning("failover not audited: %s", exc)
            return None
        return opened[0]

    return sink

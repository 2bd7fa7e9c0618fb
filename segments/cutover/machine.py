"""The cutover protocol as a pure state machine: events in, a new state and actions out.

A cutover moves a topic's produce pointer from its active segment (``from_segment``) to a new
one (``to_segment``) while several producer processes write (DESIGN.md "Segments and the
cutover")::

    PREPARE ──all live producers opened the target──▶ SWITCH ──all live producers drained──▶
    COMMIT (fence the old segment; record it SEALED with its ends and move the pointer: one
    transaction; where the ends were provisional, settle and record the final ones)
    ──every producer saw it and the ends are final, or the complete timeout──▶ COMPLETE

The produce pointer moves as soon as the fence is up: no write to the old segment can succeed
from then on. A Kafka fence needs a settle before its ends are final (a batch validated just
before the fence may still land, ``segments.kafka.store``); that wait happens after the
pointer moved, so producers never pause for it. Until the final ends are recorded the old
segment says ``ends_final: false`` and readers do not pass it.

    PREPARE / SWITCH ──timeout, failure──▶ ROLLED_BACK      ──abort──▶ ABORTED

A **failover** (``failover=True``, docs/failover.md) is the same protocol minus the seal: the
old segment's cluster cannot be reached, so COMMIT moves the pointer at once and records the
old segment UNSEALED (:class:`LeaveUnsealed`); the leader seals it later, when its cluster is
back. Producers acknowledge SWITCH without draining (a write in flight to the dead cluster
ends in its own time and, if stored, is read before the new segment in ``ordered`` mode). Its
PREPARE and SWITCH wait ``failover_phase_s`` for the producers and then go on without the
silent ones once the target exists: a producer that cannot answer cannot write the old
segment either, and whatever it stored there is read when the old segment is sealed.

Nothing here does I/O. The coordinator feeds :func:`step` with events (a producer
acknowledged a phase, joined, left; a timeout tick; the coordinator restarted; an abort; the
result of an action it ran) and runs the returned actions, which are idempotent, so a new
coordinator that takes over between any two steps re-runs the actions of the persisted state
(:class:`Restarted`) and gets the same result. Before COMMIT a restarted coordinator resumes
(deadlines are part of the state, so a phase that outlived its timeout rolls back on the next
tick); from COMMIT on it only ever rolls forward.

Producers read the same state through :func:`producer_mode`: write the old segment, hold new
requests, or write the new segment. At no state are both segments writable: the old one is
written only in PREPARE and after a rollback, the new one only once the pointer has moved,
which happens after the old one was fenced.

Example::

    state, actions = begin("c1", "p", "t", 1, 2, "pulsar-main", 8, "st", live={"a"}, now=now)
    state, actions = step(state, TargetReady(), timeouts, now)
    state, actions = step(state, Acked("a", Phase.PREPARE), timeouts, now)
    assert state.phase is Phase.SWITCH
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class Phase(StrEnum):
    PREPARE = "PREPARE"
    SWITCH = "SWITCH"
    COMMIT = "COMMIT"
    COMPLETE = "COMPLETE"
    ABORTED = "ABORTED"
    ROLLED_BACK = "ROLLED_BACK"


TERMINAL = frozenset({Phase.COMPLETE, Phase.ABORTED, Phase.ROLLED_BACK})
UNDONE = frozenset({Phase.ABORTED, Phase.ROLLED_BACK})
_ACK_FIELD = {
    Phase.PREPARE: "prepared_at",
    Phase.SWITCH: "switched_at",
    Phase.COMMIT: "committed_at",
}


class Acks(BaseModel):
    """When one producer acknowledged each phase."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    prepared_at: datetime | None = None
    switched_at: datetime | None = None
    committed_at: datetime | None = None

    def has(self, phase: Phase) -> bool:
        return getattr(self, _ACK_FIELD[phase]) is not None


class Cutover(BaseModel):
    """The persisted state of one cutover (the metastore document)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    project: str
    topic: str
    phase: Phase
    from_segment: int
    to_segment: int
    cluster: str
    partitions: int
    storage_topic: str
    started_at: datetime
    updated_at: datetime
    phase_times: dict[str, datetime]
    # Inside COMMIT: when the old segment was fenced, the pointer moved and the ends settled.
    step_times: dict[str, datetime] = {}
    producers: dict[str, Acks] = {}
    participants: tuple[str, ...] = ()
    deadline: datetime | None = None
    target_ready: bool = False
    sealed_ends: dict[int, int] | None = None
    ends_final: bool = True  # False from a provisional fence until the settled ends
    fence_settle_s: float | None = None  # the settle chosen at the fence (None: strict)
    pointer_moved: bool = False
    cleaned: bool = False
    error: str | None = None
    failover: bool = False  # an emergency cutover: no seal (module doc)
    reason: str | None = None  # why the failover began
    # A verified migration's switch ("switch") or rollback ("rollback"): its new segment's
    # readers begin where the migration says (core.migration), set at the commit.
    migration: str | None = None

    def waiting_for(self, phase: Phase) -> list[str]:
        """Participants that have not acknowledged ``phase`` yet."""
        return [m for m in self.participants if not self.producers.get(m, Acks()).has(phase)]

    def public(self) -> dict[str, object]:
        """The cutover JSON of the admin API (``/tmp/contracts.md`` "Cutover")."""
        doc = self.model_dump(
            mode="json",
            include={
                "id", "phase", "from_segment", "to_segment", "cluster", "partitions",
                "started_at", "updated_at", "phase_times", "step_times", "producers", "error",
                "failover", "reason",
            },
        )  # fmt: skip
        return doc


@dataclass(frozen=True)
class Timeouts:
    """How long each phase may wait for the producers (seconds)."""

    prepare_s: float = 30.0
    switch_s: float = 5.0
    complete_s: float = 30.0
    # A failover's PREPARE and SWITCH: then it goes on without the producers that are silent.
    failover_phase_s: float = 3.0
    # How long the seal waits after the fence is in force when every live producer drained
    # (see seal_settle); otherwise the store's own, strict wait (Kafka: the produce timeout).
    settle_s: float = 0.05


# ----------------------------------------------------------------------------- events
@dataclass(frozen=True)
class TargetReady:
    """The target storage topic and its pending segment record exist."""


@dataclass(frozen=True)
class Acked:
    member: str
    phase: Phase


@dataclass(frozen=True)
class Joined:
    member: str


@dataclass(frozen=True)
class Left:
    member: str


@dataclass(frozen=True)
class Tick:
    """Time passed: check the phase deadline."""


@dataclass(frozen=True)
class Restarted:
    """A (new) coordinator took over this cutover; ``live`` are the producers alive now."""

    live: frozenset[str]


@dataclass(frozen=True)
class AbortRequested:
    reason: str = "aborted by an operator"


@dataclass(frozen=True)
class Failed:
    """An action failed for good (the target could not be created, say)."""

    error: str


@dataclass(frozen=True)
class Sealed:
    """The old segment is fenced: its ends, whether they are final, and how long their
    settle must be (None: the store's strict wait) when they are not."""

    ends: dict[int, int]
    final: bool = True
    settle_s: float | None = None


@dataclass(frozen=True)
class EndsSettled:
    """The old segment's final ends are recorded in its segment record."""

    ends: dict[int, int]


@dataclass(frozen=True)
class PointerMoved:
    """The commit transaction went through."""


@dataclass(frozen=True)
class Cleaned:
    """The actions of a finished cutover ran (pending segment dropped)."""


Event = (
    TargetReady | Acked | Joined | Left | Tick | Restarted | AbortRequested | Failed
    | Sealed | EndsSettled | PointerMoved | Cleaned
)  # fmt: skip


# ----------------------------------------------------------------------------- actions
@dataclass(frozen=True)
class CreateTarget:
    """Create the target storage topic and the PENDING segment (idempotent)."""


@dataclass(frozen=True)
class DropTarget:
    """Delete the target storage topic; the PENDING segment record stays in the timeline."""


@dataclass(frozen=True)
class SealOld:
    """Fence ``from_segment``; report :class:`Sealed` with its end positions."""


@dataclass(frozen=True)
class MovePointer:
    """One metastore transaction: old segment SEALED with ``ends`` (final or not), new one
    ACTIVE, the produce pointer moved, and this document updated to ``after``."""

    ends: dict[int, int]
    final: bool = True


@dataclass(frozen=True)
class LeaveUnsealed:
    """A failover's commit, one metastore transaction: old segment UNSEALED (with the time
    of the switch), new one ACTIVE, the produce pointer moved, the old segment marked for the
    leader to seal later, and this document updated."""


@dataclass(frozen=True)
class SettleEnds:
    """Wait out the fence's settle (``settle_s``; None: the strict wait), then record the
    final ends in the old segment's record; report :class:`EndsSettled`."""

    settle_s: float | None


Action = CreateTarget | DropTarget | SealOld | MovePointer | SettleEnds | LeaveUnsealed


@dataclass(frozen=True)
class Outcome:
    state: Cutover
    actions: tuple[Action, ...] = ()
    refused: str | None = None  # the event was refused (abort after commit)


@dataclass(frozen=True)
class Clock:
    now: datetime
    timeouts: Timeouts = field(default_factory=Timeouts)


def begin(
    cutover_id: str,
    project: str,
    topic: str,
    from_segment: int,
    to_segment: int,
    cluster: str,
    partitions: int,
    storage_topic: str,
    *,
    live: Iterable[str],
    clock: Clock,
    failover: str | None = None,
    migration: str | None = None,
) -> Outcome:
    """A new cutover in PREPARE; its first action creates the target. ``failover``: the
    reason of an emergency cutover (module doc); ``migration``: a verified migration's
    ``switch`` or ``rollback``."""
    now = clock.now
    wait = clock.timeouts.failover_phase_s if failover else clock.timeouts.prepare_s
    state = Cutover(
        id=cutover_id,
        project=project,
        topic=topic,
        phase=Phase.PREPARE,
        from_segment=from_segment,
        to_segment=to_segment,
        cluster=cluster,
        partitions=partitions,
        storage_topic=storage_topic,
        started_at=now,
        updated_at=now,
        phase_times={Phase.PREPARE.value: now},
        participants=tuple(sorted(set(live))),
        deadline=now + timedelta(seconds=wait),
        failover=failover is not None,
        reason=failover,
        migration=migration,
    )
    return Outcome(state, (CreateTarget(),))


def step(state: Cutover, event: Event, clock: Clock) -> Outcome:
    """The next state and the actions to run, for ``event`` in ``state``."""
    if state.phase in TERMINAL:
        return _terminal(state, event)
    if isinstance(event, AbortRequested):
        if state.phase is Phase.COMMIT:
            return Outcome(state, refused="the cutover has committed; start a new cutover")
        return _undo(state, Phase.ABORTED, event.reason, clock)
    if isinstance(event, Failed) and state.phase is not Phase.COMMIT:
        return _undo(state, Phase.ROLLED_BACK, event.error, clock)
    if isinstance(event, Restarted):
        return _restarted(state, event, clock)
    if isinstance(event, Joined | Left):
        state = _membership(state, event)
    elif isinstance(event, Acked):
        state = _ack(state, event, clock)
    elif isinstance(event, TargetReady) and state.phase is Phase.PREPARE:
        state = state.model_copy(update={"target_ready": True})
    elif state.phase is Phase.COMMIT:
        return _commit(state, event, clock)
    return _advance(state, clock)


def _terminal(state: Cutover, event: Event) -> Outcome:
    if isinstance(event, AbortRequested) and state.phase is Phase.COMPLETE:
        return Outcome(state, refused="the cutover has committed; start a new cutover")
    if isinstance(event, Cleaned):
        return Outcome(state.model_copy(update={"cleaned": True}))
    if isinstance(event, Restarted) and not state.cleaned:
        return Outcome(state, cleanup(state))
    return Outcome(state)


def cleanup(state: Cutover) -> tuple[Action, ...]:
    """What a finished cutover still has to do (drop the target after a rollback)."""
    return (DropTarget(),) if state.phase in UNDONE else ()


def _undo(state: Cutover, phase: Phase, error: str, clock: Clock) -> Outcome:
    moved = _moved(state, phase, clock).model_copy(update={"error": error, "deadline": None})
    return Outcome(moved, (DropTarget(),))


def _moved(state: Cutover, phase: Phase, clock: Clock, deadline_s: float | None = None) -> Cutover:
    times = {**state.phase_times, phase.value: clock.now}
    deadline = None if deadline_s is None else clock.now + timedelta(seconds=deadline_s)
    return state.model_copy(
        update={"phase": phase, "phase_times": times, "updated_at": clock.now, "deadline": deadline}
    )


def _membership(state: Cutover, event: Joined | Left) -> Cutover:
    members = set(state.participants)
    if isinstance(event, Joined):
        members.add(event.member)
    else:
        members.discard(event.member)
    return state.model_copy(update={"participants": tuple(sorted(members))})


def _ack(state: Cutover, event: Acked, clock: Clock) -> Cutover:
    return record_ack(state, event.member, event.phase, clock.now) or state


def record_ack(state: Cutover, member: str, phase: Phase, now: datetime) -> Cutover | None:
    """``state`` with ``member``'s acknowledgement of ``phase``, or None if it changes
    nothing: a late or early answer (a PREPARE ack in SWITCH is stale; a COMMIT ack before
    the pointer moved, or a PREPARE ack before the target exists, counts for nothing)."""
    if phase is not state.phase:
        return None
    if phase is Phase.PREPARE and not state.target_ready:
        return None
    if phase is Phase.COMMIT and not state.pointer_moved:
        return None
    acks = state.producers.get(member, Acks())
    if acks.has(phase):
        return None
    acks = acks.model_copy(update={_ACK_FIELD[phase]: now})
    update: dict[str, object] = {"producers": {**state.producers, member: acks}, "updated_at": now}
    if member not in state.participants:  # an ack proves it is alive
        update["participants"] = tuple(sorted({*state.participants, member}))
    return state.model_copy(update=update)


def _advance(state: Cutover, clock: Clock) -> Outcome:
    """Move on when every participant acknowledged; roll back when the deadline passed
    (a failover goes on without the silent producers once its target exists)."""
    phase, timeouts = state.phase, clock.timeouts
    late = state.deadline is not None and clock.now >= state.deadline
    going_on = state.failover and late and state.target_ready
    if phase is Phase.PREPARE and state.target_ready and (not state.waiting_for(phase) or going_on):
        switch_s = timeouts.failover_phase_s if state.failover else timeouts.switch_s
        return Outcome(_silent(_moved(state, Phase.SWITCH, clock, switch_s), state, phase))
    if phase is Phase.SWITCH and (not state.waiting_for(phase) or going_on):
        committing = _silent(_moved(state, Phase.COMMIT, clock), state, phase)
        return Outcome(committing, (LeaveUnsealed(),) if state.failover else (SealOld(),))
    if phase is Phase.COMMIT:
        return _commit(state, Tick(), clock)
    if late:
        waiting = ", ".join(state.waiting_for(phase)) or "the target segment"
        return _undo(state, Phase.ROLLED_BACK, f"{phase} timed out waiting for {waiting}", clock)
    return Outcome(state)


def _step(state: Cutover, step: str, clock: Clock) -> dict[str, datetime]:
    """``state``'s step times with ``step`` at now."""
    return {**state.step_times, step: clock.now}


def _silent(moved: Cutover, before: Cutover, phase: Phase) -> Cutover:
    """``moved``, noting the producers a failover went on without in ``phase``."""
    waiting = before.waiting_for(phase)
    if not waiting:
        return moved
    note = f"{phase} went on without {', '.join(waiting)}"
    error = note if before.error is None else f"{before.error}; {note}"
    return moved.model_copy(update={"error": error})


def _commit(state: Cutover, event: Event, clock: Clock) -> Outcome:
    """COMMIT only rolls forward: fence, move the pointer, settle the ends, wait for the
    producers (bounded)."""
    if isinstance(event, Sealed) and state.sealed_ends is None:
        update = {
            "sealed_ends": dict(event.ends),
            "ends_final": event.final,
            "fence_settle_s": event.settle_s,
            "updated_at": clock.now,
            "step_times": _step(state, "fenced", clock),
        }
        return Outcome(
            state.model_copy(update=update), (MovePointer(dict(event.ends), event.final),)
        )
    moved = isinstance(event, PointerMoved) and (state.sealed_ends is not None or state.failover)
    if moved and not state.pointer_moved:  # the pointer moves only past a fenced segment
        wait = clock.timeouts.failover_phase_s if state.failover else clock.timeouts.complete_s
        deadline = clock.now + timedelta(seconds=wait)
        update = {"pointer_moved": True, "deadline": deadline, "updated_at": clock.now}
        update["step_times"] = _step(state, "pointer_moved", clock)
        state = state.model_copy(update=update)
    if isinstance(event, EndsSettled) and state.pointer_moved and not state.ends_final:
        update = {"sealed_ends": dict(event.ends), "ends_final": True, "updated_at": clock.now}
        update["step_times"] = _step(state, "ends_settled", clock)
        state = state.model_copy(update=update)
    if not state.pointer_moved:
        return Outcome(state)
    if not state.ends_final:  # COMPLETE only with the final ends recorded
        return Outcome(state, (SettleEnds(state.fence_settle_s),) if moved else ())
    waiting = state.waiting_for(Phase.COMMIT)
    if not waiting:
        return Outcome(_moved(state, Phase.COMPLETE, clock))
    if state.deadline is not None and clock.now >= state.deadline:
        done = _moved(state, Phase.COMPLETE, clock)
        note = f"committed; no confirmation from {', '.join(waiting)} (fenced from the old segment)"
        return Outcome(done.model_copy(update={"error": note}))
    return Outcome(state)


def _restarted(state: Cutover, event: Restarted, clock: Clock) -> Outcome:
    """A new coordinator: reconcile the participants with the live producers and re-run the
    actions of the persisted state (each idempotent)."""
    kept = {m for m in state.participants if m in event.live}
    state = state.model_copy(update={"participants": tuple(sorted(kept | set(event.live)))})
    if state.phase is Phase.PREPARE and not state.target_ready:
        return Outcome(state, (CreateTarget(),))
    if state.phase is Phase.COMMIT:
        if state.failover and not state.pointer_moved:
            return Outcome(state, (LeaveUnsealed(),))
        if state.sealed_ends is None and not state.failover:
            return Outcome(state, (SealOld(),))
        if not state.pointer_moved and state.sealed_ends is not None:
            return Outcome(state, (MovePointer(dict(state.sealed_ends), state.ends_final),))
        if not state.ends_final:
            return Outcome(state, (SettleEnds(state.fence_settle_s),))
    return _advance(state, clock)


def seal_settle(state: Cutover, live: Iterable[str], timeouts: Timeouts) -> float | None:
    """How long the seal of the old segment waits after its fence is in force: the short
    ``timeouts.settle_s`` when every live producer acknowledged SWITCH (each drained its writes
    to the old segment first, so none is in flight at the fence), else None: the store's strict
    wait, which covers a writer still in flight (a producer that joined after the cutover
    began, or one the coordinator cannot account for)."""
    switched = {m for m, acks in state.producers.items() if acks.switched_at is not None}
    return timeouts.settle_s if set(live) <= switched else None


class Mode(StrEnum):
    """What a producer does with a new request for the topic."""

    OLD = "old"  # write the segment the produce pointer names (from_segment)
    HOLD = "hold"  # wait (bounded) for the commit or the rollback
    NEW = "new"  # write to_segment


def producer_mode(state: Cutover) -> Mode:
    """How producers treat new requests in ``state``."""
    if state.phase in (Phase.PREPARE, *UNDONE):
        return Mode.OLD
    if state.phase is Phase.SWITCH or (state.phase is Phase.COMMIT and not state.pointer_moved):
        return Mode.HOLD
    return Mode.NEW


def writable(state: Cutover) -> set[int]:
    """The segments a producer may write in ``state`` (never both)."""
    mode = producer_mode(state)
    if mode is Mode.OLD:
        return {state.from_segment}
    if mode is Mode.NEW:
        return {state.to_segment}
    return set()

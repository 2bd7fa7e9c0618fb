"""The cutover state machine: every phase against every fault, and random event sequences
checked against the invariants (never both segments writable; never COMMIT without every
live producer's SWITCH ack; after COMMIT never back)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segments.cutover.machine import (
    TERMINAL,
    AbortRequested,
    Acked,
    Cleaned,
    Clock,
    CreateTarget,
    Cutover,
    DropTarget,
    EndsSettled,
    Event,
    Failed,
    Joined,
    Left,
    Mode,
    MovePointer,
    Outcome,
    Phase,
    PointerMoved,
    Restarted,
    Sealed,
    SealOld,
    SettleEnds,
    TargetReady,
    Tick,
    Timeouts,
    begin,
    producer_mode,
    seal_settle,
    step,
    writable,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUTS = Timeouts(prepare_s=10, switch_s=5, complete_s=10)
ENDS = {0: 7, 1: 3}


def clock(seconds: float = 0) -> Clock:
    return Clock(T0 + timedelta(seconds=seconds), TIMEOUTS)


def started(*live: str) -> Cutover:
    out = begin("c1", "p", "t", 1, 2, "pulsar-main", 8, "st2", live=live, clock=clock())
    assert out.actions == (CreateTarget(),)
    return out.state


def run(state: Cutover, *events: Event, at: float = 1) -> Outcome:
    out = Outcome(state)
    for event in events:
        out = step(out.state, event, clock(at))
    return out


def in_switch(*live: str) -> Cutover:
    out = run(started(*live), TargetReady(), *(Acked(m, Phase.PREPARE) for m in live))
    assert out.state.phase is Phase.SWITCH
    return out.state


def in_commit(*live: str) -> Cutover:
    out = run(in_switch(*live), *(Acked(m, Phase.SWITCH) for m in live))
    assert out.state.phase is Phase.COMMIT and out.actions == (SealOld(),)
    return out.state


def committed(*live: str) -> Cutover:
    out = run(in_commit(*live), Sealed(ENDS))
    assert out.actions == (MovePointer(ENDS),)
    out = run(out.state, PointerMoved())
    assert out.state.pointer_moved
    return out.state


def test_happy_path_walks_every_phase_with_times() -> None:
    state = committed("a", "b")
    assert state.phase is Phase.COMMIT and producer_mode(state) is Mode.NEW
    out = run(state, Acked("a", Phase.COMMIT), Acked("b", Phase.COMMIT))
    assert out.state.phase is Phase.COMPLETE
    assert set(out.state.phase_times) == {"PREPARE", "SWITCH", "COMMIT", "COMPLETE"}
    assert out.state.producers["a"].committed_at is not None
    assert out.state.public()["phase"] == "COMPLETE"


def test_the_seal_settles_briefly_only_when_every_live_producer_drained() -> None:
    """SWITCH acknowledged = drained: nothing of theirs is in flight at the fence, so the seal
    needs no produce-timeout wait; anyone live who did not drain gets the strict wait."""
    state = in_commit("a", "b")
    assert seal_settle(state, ["a", "b"], TIMEOUTS) == TIMEOUTS.settle_s
    assert seal_settle(state, ["a"], TIMEOUTS) == TIMEOUTS.settle_s  # b died: it writes nothing
    assert seal_settle(state, ["a", "b", "late"], TIMEOUTS) is None  # joined after SWITCH
    assert seal_settle(in_switch("a", "b"), ["a", "b"], TIMEOUTS) is None


def test_provisional_ends_settle_after_the_pointer_moved_and_complete_waits_for_them() -> None:
    """A Kafka fence: the pointer moves on the fence (producers pause for the fence only),
    the settle and the final ends come after, and COMPLETE waits for them, even past the
    complete deadline."""
    out = run(in_commit("a", "b"), Sealed(ENDS, final=False, settle_s=0.05))
    assert out.actions == (MovePointer(ENDS, final=False),) and not out.state.ends_final
    out = run(out.state, PointerMoved())
    assert out.actions == (SettleEnds(0.05),) and producer_mode(out.state) is Mode.NEW
    out = run(out.state, Acked("a", Phase.COMMIT), Acked("b", Phase.COMMIT), Tick(), at=1_000)
    assert out.state.phase is Phase.COMMIT and not out.state.ends_final
    final = {0: 8, 1: 3}  # a batch validated before the fence landed during the settle
    out = run(out.state, EndsSettled(final), at=1_000)
    assert out.state.phase is Phase.COMPLETE
    assert out.state.ends_final and out.state.sealed_ends == final


def test_prepare_waits_for_the_target_before_acks_count() -> None:
    out = run(started("a"), Acked("a", Phase.PREPARE))
    assert out.state.phase is Phase.PREPARE and out.state.producers == {}


@pytest.mark.parametrize("phase", [Phase.PREPARE, Phase.SWITCH])
def test_a_producer_that_never_answers_rolls_back_at_the_deadline(phase: Phase) -> None:
    state = started("a", "b") if phase is Phase.PREPARE else in_switch("a", "b")
    state = run(state, TargetReady(), Acked("a", phase)).state
    assert run(state, Tick(), at=4).state.phase is phase
    out = run(state, Tick(), at=100)
    assert out.state.phase is Phase.ROLLED_BACK and out.actions == (DropTarget(),)
    assert "b" in (out.state.error or "")
    assert writable(out.state) == {1}


def test_an_answer_that_comes_late_changes_nothing() -> None:
    state = in_switch("a", "b")
    rolled = run(state, Tick(), at=100).state
    assert run(rolled, Acked("b", Phase.SWITCH)).state == rolled
    stale = run(state, Acked("a", Phase.PREPARE)).state  # a PREPARE ack seen in SWITCH
    assert stale == state


@pytest.mark.parametrize("phase", [Phase.PREPARE, Phase.SWITCH])
def test_a_producer_that_dies_is_not_waited_for(phase: Phase) -> None:
    state = run(started("a", "b"), TargetReady()).state
    if phase is Phase.SWITCH:
        state = in_switch("a", "b")
    out = run(state, Acked("a", phase), Left("b"))
    assert out.state.phase is (Phase.SWITCH if phase is Phase.PREPARE else Phase.COMMIT)


@pytest.mark.parametrize("phase", [Phase.PREPARE, Phase.SWITCH, Phase.COMMIT])
def test_a_producer_that_joins_takes_part_from_the_current_phase(phase: Phase) -> None:
    state = {
        Phase.PREPARE: run(started("a"), TargetReady()).state,
        Phase.SWITCH: in_switch("a"),
        Phase.COMMIT: committed("a"),
    }[phase]
    state = run(state, Joined("n"), Acked("a", phase)).state
    assert state.phase is phase and state.waiting_for(phase) == ["n"]
    nxt = run(state, Acked("n", phase)).state
    assert nxt.phase is not phase


def test_a_producer_that_rejoins_must_acknowledge_again() -> None:
    state = run(in_switch("a", "b"), Left("b"), Joined("b")).state
    assert state.waiting_for(Phase.SWITCH) == ["a", "b"]


def test_commit_never_goes_back() -> None:
    state = in_commit("a")
    for event in (AbortRequested(), Failed("boom"), Tick(), Left("a")):
        out = run(state, event, at=1_000)
        assert out.state.phase is Phase.COMMIT
    assert run(state, AbortRequested()).refused is not None
    done = run(committed("a"), Tick(), at=1_000).state
    assert done.phase is Phase.COMPLETE and "a" in (done.error or "")
    assert run(done, AbortRequested()).refused is not None


@pytest.mark.parametrize("phase", [Phase.PREPARE, Phase.SWITCH])
def test_abort_before_commit_drops_the_target(phase: Phase) -> None:
    state = started("a") if phase is Phase.PREPARE else in_switch("a")
    out = run(state, AbortRequested())
    assert out.state.phase is Phase.ABORTED and out.actions == (DropTarget(),)
    assert run(out.state, Cleaned()).state.cleaned


def test_a_failed_target_rolls_back() -> None:
    out = run(started("a"), Failed("cannot create"))
    assert out.state.phase is Phase.ROLLED_BACK and out.state.error == "cannot create"


# A new coordinator between any two steps: the state it reads decides what it re-runs.
RESTART_CASES = {
    "before the target": (lambda: started("a"), (CreateTarget(),), Phase.PREPARE),
    "target made": (lambda: run(started("a"), TargetReady()).state, (), Phase.PREPARE),
    "in switch": (lambda: in_switch("a"), (), Phase.SWITCH),
    "commit decided": (lambda: in_commit("a"), (SealOld(),), Phase.COMMIT),
    "sealed, pointer not moved": (
        lambda: run(in_commit("a"), Sealed(ENDS)).state,
        (MovePointer(ENDS),),
        Phase.COMMIT,
    ),
    "pointer moved": (lambda: committed("a"), (), Phase.COMMIT),
    "fenced, ends to settle, pointer not moved": (
        lambda: run(in_commit("a"), Sealed(ENDS, final=False, settle_s=None)).state,
        (MovePointer(ENDS, final=False),),
        Phase.COMMIT,
    ),
    "pointer moved, ends to settle": (
        lambda: run(in_commit("a"), Sealed(ENDS, final=False, settle_s=0.05), PointerMoved()).state,
        (SettleEnds(0.05),),
        Phase.COMMIT,
    ),
}


@pytest.mark.parametrize("case", sorted(RESTART_CASES))
def test_a_new_coordinator_resumes_from_any_step(case: str) -> None:
    make, actions, phase = RESTART_CASES[case]
    out = step(make(), Restarted(frozenset({"a"})), clock(1))
    assert out.actions == actions and out.state.phase is phase


def test_a_new_coordinator_after_the_deadline_rolls_back() -> None:
    out = step(in_switch("a", "b"), Restarted(frozenset({"a", "b"})), clock(100))
    assert out.state.phase is Phase.ROLLED_BACK and out.actions == (DropTarget(),)


def test_a_new_coordinator_forgets_dead_producers_and_counts_new_ones() -> None:
    out = step(in_switch("a", "b"), Restarted(frozenset({"a", "c"})), clock(1))
    assert out.state.participants == ("a", "c")


def test_a_new_coordinator_cleans_a_rollback_left_unfinished() -> None:
    rolled = run(started("a"), AbortRequested()).state
    assert step(rolled, Restarted(frozenset()), clock(1)).actions == (DropTarget(),)
    cleaned = run(rolled, Cleaned()).state
    assert step(cleaned, Restarted(frozenset()), clock(1)).actions == ()


# ----------------------------------------------------------------------------- random runs
MEMBERS = ("a", "b", "c", "d")
PHASES = (Phase.PREPARE, Phase.SWITCH, Phase.COMMIT)
events = st.one_of(
    st.builds(TargetReady),
    st.builds(Acked, st.sampled_from(MEMBERS), st.sampled_from(PHASES)),
    st.builds(Joined, st.sampled_from(MEMBERS)),
    st.builds(Left, st.sampled_from(MEMBERS)),
    st.builds(Tick),
    st.builds(AbortRequested),
    st.builds(Failed, st.just("x")),
    st.builds(Sealed, st.just(ENDS), st.booleans(), st.sampled_from([None, 0.05])),
    st.builds(EndsSettled, st.just({0: 8, 1: 3})),
    st.builds(PointerMoved),
    st.builds(Restarted, st.frozensets(st.sampled_from(MEMBERS))),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(events, st.floats(0, 3)), max_size=60))
def test_random_event_sequences_keep_the_invariants(seq: list[tuple[Event, float]]) -> None:
    live = {"a", "b"}
    state, now, committed_once = started(*live), 0.0, False
    for event, dt in seq:
        now += dt
        if isinstance(event, Joined):
            live.add(event.member)
        elif isinstance(event, Left):
            live.discard(event.member)
        elif isinstance(event, Restarted):
            live = set(event.live)
        elif isinstance(event, Acked) and event.member not in live:
            continue  # only live producers answer
        before = state
        state = step(state, event, clock(now)).state
        assert len(writable(state)) <= 1
        if state.phase is Phase.COMMIT and before.phase is not Phase.COMMIT:
            # every live producer acknowledged SWITCH
            assert all(state.producers.get(m) and state.producers[m].switched_at for m in live)
        if state.pointer_moved:
            assert state.sealed_ends is not None
        if state.sealed_ends is not None or state.phase is Phase.COMPLETE:
            assert state.phase in (Phase.COMMIT, Phase.COMPLETE)
        if state.phase is Phase.COMPLETE:
            assert state.pointer_moved and state.ends_final
        if before.phase in TERMINAL:
            assert state.phase is before.phase  # a finished cutover stays finished
        if before.phase in (Phase.COMMIT, Phase.COMPLETE):
            committed_once = True
        if committed_once:
            assert state.phase in (Phase.COMMIT, Phase.COMPLETE)


# ----------------------------------------------------------------------------- the matrix
# Two producers; "a" has acknowledged the current phase, the fault hits "b".
def _at(phase: str) -> Cutover:
    if phase == "PREPARE":
        return run(started("a", "b"), TargetReady(), Acked("a", Phase.PREPARE)).state
    if phase == "SWITCH":
        return run(in_switch("a", "b"), Acked("a", Phase.SWITCH)).state
    if phase == "COMMIT":  # decided, old segment not sealed yet
        return in_commit("a", "b")
    return run(committed("a", "b"), Acked("a", Phase.COMMIT)).state  # pointer moved


_ACK_OF = {"PREPARE": Phase.PREPARE, "SWITCH": Phase.SWITCH, "COMMIT": Phase.COMMIT,
           "MOVED": Phase.COMMIT}  # fmt: skip
# fault -> (events, at which second); every deadline has passed at t=1000 s
FAULTS: dict[str, Any] = {
    "never answers": (lambda ph: [Tick()], 1_000),
    "dies": (lambda ph: [Left("b")], 1),
    "rejoins": (lambda ph: [Left("b"), Joined("b")], 1),
    "answers late": (lambda ph: [Tick(), Acked("b", _ACK_OF[ph])], 1_000),
    "coordinator restarts": (lambda ph: [Restarted(frozenset({"a", "b"}))], 1),
}
# (phase, fault) -> the phase that follows. A producer that left is not waited for: the
# phase moves on at once, and when it rejoins it takes part from the next phase.
EXPECTED = {
    ("PREPARE", "never answers"): Phase.ROLLED_BACK,
    ("PREPARE", "dies"): Phase.SWITCH,
    ("PREPARE", "rejoins"): Phase.SWITCH,
    ("PREPARE", "answers late"): Phase.ROLLED_BACK,
    ("PREPARE", "coordinator restarts"): Phase.PREPARE,
    ("SWITCH", "never answers"): Phase.ROLLED_BACK,
    ("SWITCH", "dies"): Phase.COMMIT,
    ("SWITCH", "rejoins"): Phase.COMMIT,
    ("SWITCH", "answers late"): Phase.ROLLED_BACK,
    ("SWITCH", "coordinator restarts"): Phase.SWITCH,
    ("COMMIT", "never answers"): Phase.COMMIT,  # never back once decided
    ("COMMIT", "dies"): Phase.COMMIT,
    ("COMMIT", "rejoins"): Phase.COMMIT,
    ("COMMIT", "answers late"): Phase.COMMIT,
    ("COMMIT", "coordinator restarts"): Phase.COMMIT,
    ("MOVED", "never answers"): Phase.COMPLETE,  # it is fenced: complete, with a note
    ("MOVED", "dies"): Phase.COMPLETE,
    ("MOVED", "rejoins"): Phase.COMPLETE,
    ("MOVED", "answers late"): Phase.COMPLETE,
    ("MOVED", "coordinator restarts"): Phase.COMMIT,
}


@pytest.mark.parametrize(("phase", "fault"), sorted(EXPECTED))
def test_every_phase_against_every_fault(phase: str, fault: str) -> None:
    state = _at(phase)
    events, at = FAULTS[fault]
    for event in events(phase):
        state = step(state, event, clock(at)).state
        assert len(writable(state)) <= 1
    assert state.phase is EXPECTED[(phase, fault)]
    if state.phase in (Phase.ROLLED_BACK,):
        assert writable(state) == {1} and state.sealed_ends is None
    if phase in ("COMMIT", "MOVED"):
        assert state.phase in (Phase.COMMIT, Phase.COMPLETE)
    if fault == "rejoins" and state.phase not in TERMINAL:
        assert "b" in state.participants  # and is waited for in the phase it rejoined in
    if (phase, fault) == ("COMMIT", "coordinator restarts"):
        assert step(_at(phase), events(phase)[0], clock(at)).actions == (SealOld(),)

"""CommitTracker and CommitPolicy: in-order commit over out-of-order completion."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
)

from core.tasks import cancel
from delivery_workers.commit import Committer
from delivery_workers.tracking import CommitPolicy, CommitTracker, CommitTrackingError
from tests.support.clock import ManualClock
from tests.support.until import until

SETTINGS = settings(deadline=None, max_examples=200)


def started(partition: int = 0, at: int = 0) -> CommitTracker:
    tracker = CommitTracker()
    tracker.start(partition, at)
    return tracker


# --- examples ----------------------------------------------------------------------------


def test_out_of_order_completion_commits_in_order() -> None:
    tracker = started(0, 100)
    for position in (100, 104, 109):
        tracker.track(0, position)
    assert tracker.committable(0) is None  # 100 is open and 100 is where we started
    tracker.done(0, 104)
    assert tracker.committable(0) is None  # 104 finished first, but 100 still holds it back
    tracker.done(0, 100)
    assert tracker.committable(0) == 109  # the next open one, not 101: positions have gaps
    tracker.done(0, 109)
    assert tracker.committable(0) == 110  # all terminal: past the last one
    assert tracker.pending(0) == 0


def test_nothing_to_commit_right_after_start() -> None:
    tracker = started(3, 42)
    assert tracker.committable(3) is None
    assert tracker.committable_all() == {}
    assert tracker.committed(3) == 42


def test_gap_after_start_is_committable_since_nothing_lies_below() -> None:
    tracker = started(0, 0)
    tracker.track(0, 7)  # a Kafka transaction marker took 0..6, say
    assert tracker.committable(0) == 7


def test_mark_committed_hides_the_value_until_the_frontier_moves() -> None:
    tracker = started()
    tracker.track(0, 1)
    tracker.track(0, 2)
    tracker.done(0, 1)
    assert tracker.committable_all() == {0: 2}
    tracker.mark_all_committed({0: 2})
    assert tracker.committable(0) is None
    tracker.done(0, 2)
    assert tracker.committable(0) == 3


def test_partitions_are_independent() -> None:
    tracker = CommitTracker()
    tracker.start(0, 0)
    tracker.start(1, 500)
    tracker.track(0, 0)
    tracker.track(1, 500)
    tracker.track(1, 501)
    tracker.done(1, 500)
    assert tracker.committable_all() == {1: 501}
    assert tracker.pending() == 2
    assert tracker.pending(0) == 1
    assert tracker.partitions == {0, 1}


def test_start_again_forgets_what_was_tracked() -> None:
    tracker = started()
    tracker.track(0, 5)
    tracker.start(0, 1000)  # a seek
    assert tracker.pending(0) == 0
    assert tracker.committable(0) is None
    with pytest.raises(CommitTrackingError, match="not open"):
        tracker.done(0, 5)


@pytest.mark.parametrize("position", [9, 10])
def test_track_must_grow_strictly(position: int) -> None:
    tracker = started()
    tracker.track(0, 10)
    with pytest.raises(CommitTrackingError, match="out of order"):
        tracker.track(0, position)


def test_track_below_start_is_refused() -> None:
    with pytest.raises(CommitTrackingError, match="out of order"):
        started(0, 10).track(0, 9)


def test_track_below_a_finished_one_is_refused() -> None:
    tracker = started()
    tracker.track(0, 4)
    tracker.done(0, 4)  # popped from the head: only the floor remembers it
    with pytest.raises(CommitTrackingError, match="out of order"):
        tracker.track(0, 4)


def test_unknown_or_double_done_is_an_error() -> None:
    tracker = started()
    tracker.track(0, 1)
    tracker.track(0, 2)
    with pytest.raises(CommitTrackingError, match="not open"):
        tracker.done(0, 3)
    tracker.done(0, 2)
    with pytest.raises(CommitTrackingError, match="not open"):
        tracker.done(0, 2)


def test_unstarted_partition_is_an_error() -> None:
    with pytest.raises(CommitTrackingError, match="never started"):
        CommitTracker().track(0, 0)


@pytest.mark.parametrize("position", [4, 7])
def test_mark_committed_outside_last_commit_and_frontier_is_refused(position: int) -> None:
    tracker = started(0, 5)
    tracker.track(0, 5)
    tracker.track(0, 6)
    tracker.done(0, 5)  # frontier 6
    with pytest.raises(CommitTrackingError, match="cannot mark"):
        tracker.mark_committed(0, position)


# --- properties --------------------------------------------------------------------------


@SETTINGS
@given(
    start=st.integers(0, 1 << 40),
    gaps=st.lists(st.integers(1, 1000), min_size=1, max_size=60),
    data=st.data(),
)
def test_any_completion_order_ends_past_the_last(
    start: int, gaps: list[int], data: st.DataObject
) -> None:
    positions = [start + sum(gaps[: i + 1]) - 1 for i in range(len(gaps))]
    tracker = started(0, start)
    for position in positions:
        tracker.track(0, position)
    seen = [start]
    for position in data.draw(st.permutations(positions)):
        tracker.done(0, position)
        value = tracker.committable(0)
        if value is not None:
            assert value >= seen[-1]
            seen.append(value)
    assert tracker.committable(0) == positions[-1] + 1


class CommitMachine(RuleBasedStateMachine):
    """Random interleavings of track, done and commit on two partitions, against a model."""

    def __init__(self) -> None:
        super().__init__()
        self.tracker = CommitTracker()
        self.tracked: dict[int, list[int]] = {0: [], 1: []}
        self.open: dict[int, set[int]] = {0: set(), 1: set()}
        self.start = {0: 0, 1: 1 << 32}
        self.frontier = dict(self.start)
        for partition, position in self.start.items():
            self.tracker.start(partition, position)

    @rule(partition=st.sampled_from([0, 1]), gap=st.integers(0, 5))
    def track(self, partition: int, gap: int) -> None:
        tracked = self.tracked[partition]
        position = (tracked[-1] + 1 if tracked else self.start[partition]) + gap
        self.tracker.track(partition, position)
        tracked.append(position)
        self.open[partition].add(position)

    @precondition(lambda self: any(self.open.values()))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        partition = data.draw(st.sampled_from([p for p, o in self.open.items() if o]))
        position = data.draw(st.sampled_from(sorted(self.open[partition])))
        self.tracker.done(partition, position)
        self.open[partition].discard(position)

    @rule(partition=st.sampled_from([0, 1]))
    def commit(self, partition: int) -> None:
        value = self.tracker.committable(partition)
        if value is not None:
            assert value > self.tracker.committed(partition)
            self.tracker.mark_committed(partition, value)

    @rule(partition=st.sampled_from([0, 1]), data=st.data())
    def double_done_is_refused(self, partition: int, data: st.DataObject) -> None:
        finished = [p for p in self.tracked[partition] if p not in self.open[partition]]
        position = data.draw(st.sampled_from(finished)) if finished else -1
        with pytest.raises(CommitTrackingError):
            self.tracker.done(partition, position)

    @invariant()
    def frontier_is_safe_monotonic_and_complete(self) -> None:
        for partition, tracked in self.tracked.items():
            value = self.tracker.committable(partition)
            frontier = self.tracker.committed(partition) if value is None else value
            open_ = self.open[partition]
            assert frontier >= self.frontier[partition]  # never goes backwards
            self.frontier[partition] = frontier
            if open_:  # never past an open message: at-least-once
                assert frontier == min(open_)
            elif tracked:
                assert frontier == tracked[-1] + 1
            else:
                assert frontier == self.start[partition]
            assert self.tracker.pending(partition) == len(open_)


TestCommitMachine = CommitMachine.TestCase
TestCommitMachine.settings = settings(deadline=None, max_examples=100, stateful_step_count=60)


# --- CommitPolicy --------------------------------------------------------------------------


def test_policy_flushes_after_n_messages() -> None:
    clock = ManualClock(1000.0)
    policy = CommitPolicy(every_n=3, every_s=60.0, clock=clock)
    policy.record(2)
    assert not policy.due()
    policy.record()
    assert policy.due()
    assert policy.wait_s() == 0.0
    policy.flushed()
    assert not policy.due()
    assert policy.waiting == 0


def test_policy_flushes_after_the_interval_only_when_something_waits() -> None:
    clock = ManualClock(1000.0)
    policy = CommitPolicy(every_n=500, every_s=1.0, clock=clock)
    clock.now += 5.0
    assert not policy.due()  # nothing became terminal: nothing to commit
    assert policy.wait_s() is None
    policy.record()
    assert policy.due()  # a quiet stream commits at once
    policy.flushed()
    policy.record()
    assert not policy.due()
    clock.now += 0.25
    assert policy.wait_s() == pytest.approx(0.75)
    clock.now += 0.75
    assert policy.due()


def test_policy_rejects_nonsense() -> None:
    with pytest.raises(CommitTrackingError):
        CommitPolicy(every_n=0)


# --- an idle committer sleeps (issue 35: 2 000 idle subscriptions on one worker) ---------


class _CountingPolicy(CommitPolicy):
    """Counts the committer's looks at the policy: each is a wake-up of its loop."""

    looks = 0

    def wait_s(self) -> float | None:
        self.looks += 1
        return super().wait_s()


class _Path:
    commits = 0

    async def commit(self, barrier: object = None) -> bool:
        self.commits += 1
        return True


async def test_an_idle_committer_does_not_wake_until_something_waits() -> None:
    policy, path = _CountingPolicy(every_n=500, every_s=0.05), _Path()
    task = asyncio.create_task(Committer(policy, "p/s", path).run())
    try:
        # A sleep that proves nothing happens: polling every 0.2 s looked 3 times by now.
        await asyncio.sleep(0.7)
        assert policy.looks == 1
        assert path.commits == 0
        policy.record()  # a message became terminal: committed within every_s
        await until(lambda: path.commits == 1, timeout=5, what="the commit after record()")
        await asyncio.sleep(0.3)  # and asleep again once it is committed
        assert path.commits == 1
        assert policy.looks <= 4
    finally:
        await cancel(task)

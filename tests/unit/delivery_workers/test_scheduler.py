"""GroupScheduler and ReadyRing: group ordering, back-pressure and fairness."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from delivery_workers.scheduler import Completion, GroupScheduler, ReadyRing, SchedulingError

SETTINGS = settings(deadline=None, max_examples=200)
KEYS = [None, "a", "b", "c"]


@dataclass(eq=False)
class Msg:
    """A distinct object per offer, as a message read from storage is."""

    key: str | None
    seq: int


def offer_all(scheduler: GroupScheduler[Msg], keys: Sequence[str | None]) -> list[Msg]:
    msgs = [Msg(key, seq) for seq, key in enumerate(keys)]
    for msg in msgs:
        assert scheduler.offer(msg.key, msg)
    return msgs


def run_to_end(scheduler: GroupScheduler[Msg]) -> list[Msg]:
    """Dispatch one at a time, each completing DONE at once; the dispatch order."""
    order = []
    while (item := scheduler.next_ready()) is not None:
        order.append(item)
        scheduler.completed(item, Completion.DONE)
    return order


# --- examples ----------------------------------------------------------------------------


def test_one_in_flight_per_group_in_offer_order() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=10)
    a0, a1, b0 = offer_all(scheduler, ["a", "a", "b"])
    assert scheduler.next_ready() is a0
    assert scheduler.next_ready() is b0
    assert scheduler.next_ready() is None  # a1 waits behind a0
    scheduler.completed(a0, Completion.DONE)
    assert scheduler.next_ready() is a1


def test_round_robin_keeps_a_hot_group_from_starving_others() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=1)
    offer_all(scheduler, ["hot"] * 4 + ["x", "y"])
    assert [m.key for m in run_to_end(scheduler)] == ["hot", "x", "y", "hot", "hot", "hot"]


def test_ungrouped_is_plain_fifo_up_to_max_in_flight() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=2)
    m = offer_all(scheduler, [None] * 4)
    assert (scheduler.next_ready(), scheduler.next_ready()) == (m[0], m[1])
    assert scheduler.next_ready() is None  # in-flight limit
    scheduler.completed(m[1], Completion.DONE)
    assert scheduler.next_ready() is m[2]
    scheduler.completed(m[0], Completion.BLOCKED)  # nothing to block without a key
    assert scheduler.next_ready() is m[3]
    assert scheduler.blocked_groups == frozenset()


def test_a_blocked_group_waits_for_release_while_others_go_on() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=5)
    a0, a1, b0, b1 = offer_all(scheduler, ["a", "a", "b", "b"])
    assert scheduler.next_ready() is a0
    scheduler.completed(a0, Completion.BLOCKED)
    assert scheduler.blocked_groups == {"a"}
    assert run_to_end(scheduler) == [b0, b1]
    assert scheduler.waiting == 1
    assert scheduler.release("a") is True
    assert scheduler.release("a") is False  # a duplicate release is harmless
    assert run_to_end(scheduler) == [a1]
    assert scheduler.buffered == 0


def test_block_after_restart_and_drain_to_park_durably() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=5)
    scheduler.block("a")  # its head failed before the restart
    a0, a1, c0 = offer_all(scheduler, ["a", "a", "c"])
    assert run_to_end(scheduler) == [c0]
    assert scheduler.is_blocked("a")
    assert scheduler.drain("a") == [a0, a1]
    assert scheduler.buffered == 0
    with pytest.raises(SchedulingError, match="not blocked"):
        scheduler.drain("c")


def test_offer_refuses_when_full_and_accepts_again_after_completion() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=1, max_buffered=2)
    m0, _ = offer_all(scheduler, ["a", "b"])
    assert scheduler.offer("c", Msg("c", 9)) is False
    assert scheduler.buffered == 2
    assert scheduler.next_ready() is m0
    assert scheduler.offer("c", Msg("c", 9)) is False  # in flight still counts as held
    scheduler.completed(m0, Completion.DONE)
    assert scheduler.offer("c", Msg("c", 9)) is True


def test_misuse_is_a_clear_error() -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=1)
    msg = Msg("a", 0)
    scheduler.offer("a", msg)
    with pytest.raises(SchedulingError, match="already held"):
        scheduler.offer("a", msg)
    with pytest.raises(SchedulingError, match="not in flight"):
        scheduler.completed(msg, Completion.DONE)  # waiting, not handed out
    with pytest.raises(SchedulingError, match=">= 1"):
        GroupScheduler(max_in_flight=0)


def test_ready_ring_takes_turns() -> None:
    ring: ReadyRing[str] = ReadyRing()
    assert ring.take() is None
    for sub in ("s1", "s2", "s3"):
        ring.mark_ready(sub)
    ring.mark_ready("s1")  # already ready: keeps its place
    assert [ring.take() for _ in range(4)] == ["s1", "s2", "s3", "s1"]
    ring.mark_idle("s2")
    assert [ring.take() for _ in range(3)] == ["s3", "s1", "s3"]
    assert "s2" not in ring
    assert len(ring) == 2


# --- properties: GroupScheduler --------------------------------------------------------------


class SchedulerMachine(RuleBasedStateMachine):
    """Random offer / next / completed / release / drain against a model of the contract."""

    @initialize(max_in_flight=st.integers(1, 4), max_buffered=st.integers(1, 12))
    def setup(self, max_in_flight: int, max_buffered: int) -> None:
        self.scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight, max_buffered)
        self.seq = 0
        self.waiting: dict[str | None, list[Msg]] = {key: [] for key in KEYS}
        self.flying: list[Msg] = []
        self.blocked: set[str] = set()

    def dispatchable(self) -> bool:
        if len(self.flying) >= self.scheduler.max_in_flight:
            return False
        busy = {m.key for m in self.flying}
        return bool(self.waiting[None]) or any(
            self.waiting[k] and k not in busy and k not in self.blocked for k in KEYS[1:]
        )

    @rule(key=st.sampled_from(KEYS))
    def offer(self, key: str | None) -> None:
        msg = Msg(key, self.seq)
        self.seq += 1
        room = self.scheduler.buffered < self.scheduler.max_buffered
        assert self.scheduler.offer(key, msg) is room
        if room:
            self.waiting[key].append(msg)

    @rule()
    def next_ready(self) -> None:
        expected = self.dispatchable()
        item = self.scheduler.next_ready()
        assert (item is not None) is expected
        if item is None:
            return
        if item.key is not None:
            assert item.key not in self.blocked
            assert item.key not in {m.key for m in self.flying}
        assert item is self.waiting[item.key][0]  # the head of its group: offer order
        self.waiting[item.key].pop(0)
        self.flying.append(item)

    @precondition(lambda self: self.flying)
    @rule(data=st.data(), outcome=st.sampled_from(Completion))
    def complete(self, data: st.DataObject, outcome: Completion) -> None:
        item = data.draw(st.sampled_from(self.flying))
        self.scheduler.completed(item, outcome)
        self.flying.remove(item)
        if outcome is Completion.BLOCKED and item.key is not None:
            self.blocked.add(item.key)

    @rule(group=st.sampled_from(KEYS[1:]))
    def release(self, group: str) -> None:
        assert self.scheduler.release(group) is (group in self.blocked)
        self.blocked.discard(group)

    @precondition(lambda self: self.blocked)
    @rule(data=st.data())
    def drain(self, data: st.DataObject) -> None:
        group = data.draw(st.sampled_from(sorted(self.blocked)))
        assert self.scheduler.drain(group) == self.waiting[group]
        self.waiting[group] = []

    @invariant()
    def bounds_and_introspection(self) -> None:
        scheduler = self.scheduler
        held = len(self.flying) + sum(len(w) for w in self.waiting.values())
        assert scheduler.in_flight == len(self.flying) <= scheduler.max_in_flight
        assert scheduler.buffered == held <= scheduler.max_buffered
        assert scheduler.blocked_groups == self.blocked
        per_group = Counter(m.key for m in self.flying if m.key is not None)
        assert all(n == 1 for n in per_group.values())  # one in flight per group


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(deadline=None, max_examples=100, stateful_step_count=80)

keys_st = st.lists(st.sampled_from(KEYS + ["d", "e"]), max_size=60)


def drive(scheduler: GroupScheduler[Msg], data: st.DataObject, stop_at: Msg | None) -> list[Msg]:
    """Fill up, then complete a random in-flight item (DONE, or BLOCKED for ``stop_at``),
    until nothing can go; the dispatch order."""
    order: list[Msg] = []
    flying: list[Msg] = []
    while True:
        while (item := scheduler.next_ready()) is not None:
            order.append(item)
            flying.append(item)
        if not flying:
            return order
        item = flying.pop(data.draw(st.integers(0, len(flying) - 1)))
        scheduler.completed(item, Completion.BLOCKED if item is stop_at else Completion.DONE)


def by_group(msgs: list[Msg]) -> dict[str | None, list[int]]:
    groups: dict[str | None, list[int]] = {}
    for msg in msgs:
        groups.setdefault(msg.key, []).append(msg.seq)
    return groups


@SETTINGS
@given(keys=keys_st, max_in_flight=st.integers(1, 8), data=st.data())
def test_everything_is_dispatched_once_in_group_order(
    keys: list[str | None], max_in_flight: int, data: st.DataObject
) -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight)
    msgs = offer_all(scheduler, keys)
    order = drive(scheduler, data, stop_at=None)
    assert sorted(m.seq for m in order) == [m.seq for m in msgs]  # each exactly once
    grouped = {k: seqs for k, seqs in by_group(order).items() if k is not None}
    assert all(seqs == sorted(seqs) for seqs in grouped.values())
    assert scheduler.buffered == 0


@SETTINGS
@given(keys=keys_st, max_in_flight=st.integers(1, 8), data=st.data())
def test_a_blocked_group_does_not_hold_up_the_others(
    keys: list[str | None], max_in_flight: int, data: st.DataObject
) -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight)
    msgs = offer_all(scheduler, ["a", *keys])
    order = drive(scheduler, data, stop_at=msgs[0])
    rest_of_a = [m for m in msgs[1:] if m.key == "a"]
    assert sorted(m.seq for m in order) == [m.seq for m in msgs if m not in rest_of_a]
    assert scheduler.blocked_groups == {"a"}
    assert scheduler.waiting == len(rest_of_a)
    scheduler.release("a")
    assert drive(scheduler, data, stop_at=None) == rest_of_a


@SETTINGS
@given(keys=keys_st)
def test_dispatch_is_round_robin_over_lanes(keys: list[str | None]) -> None:
    scheduler: GroupScheduler[Msg] = GroupScheduler(max_in_flight=1)
    msgs = offer_all(scheduler, keys)
    lanes: dict[str | None, list[Msg]] = {}
    for msg in msgs:
        lanes.setdefault(msg.key, []).append(msg)
    expected = []
    while any(lanes.values()):  # the reference: cycle the lanes in order of first offer
        expected += [lane.pop(0) for lane in lanes.values() if lane]
    assert run_to_end(scheduler) == expected


# --- properties: ReadyRing ---------------------------------------------------------------------

ring_op = st.one_of(
    st.tuples(st.sampled_from(["ready", "idle"]), st.integers(0, 5)),
    st.just(("take", -1)),
)


@SETTINGS
@given(ops=st.lists(ring_op, max_size=200))
def test_ready_ring_never_serves_another_twice_between_two_turns(
    ops: list[tuple[str, int]],
) -> None:
    ring: ReadyRing[int] = ReadyRing()
    ready: set[int] = set()
    # per key continuously ready since its last turn: the keys served since then
    since: dict[int, list[int]] = {}
    for op, key in ops:
        if op == "ready":
            ring.mark_ready(key)
            ready.add(key)
        elif op == "idle":
            ring.mark_idle(key)
            ready.discard(key)
            since.pop(key, None)
        else:
            served = ring.take()
            if served is None:
                assert not ready
                continue
            assert served in ready
            if served in since:
                assert max(Counter(since[served]).values(), default=0) <= 1
            for other, log in since.items():
                if other != served:
                    log.append(served)
            since[served] = []
        assert len(ring) == len(ready)

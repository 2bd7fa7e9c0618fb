"""Issue 20's pure parts: the producers' write figures, the leader's verdict on them, and the
cutover machine with ``failover`` set (the same phases minus the seal)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.errors import StorageUnavailable
from core.model import Pointer, Segment, SegmentState, Topic
from segments.cutover.machine import (
    Acked,
    Clock,
    CreateTarget,
    LeaveUnsealed,
    Phase,
    PointerMoved,
    Restarted,
    TargetReady,
    Tick,
    Timeouts,
    begin,
    step,
)
from segments.failover.health import Detection, HealthJudge, HealthReport, WriteHealth, WriteOutcome
from segments.protocol import Produced, Record
from segments.writer import SegmentWriter
from tests.support.clock import ManualClock

KEY = ("p", "t", 1)


def report(member: str, at: float, **fields: object) -> HealthReport:
    return HealthReport(project="p", topic="t", segment=1, member=member, at=at, **fields)  # type: ignore[arg-type]


def test_a_producer_reports_failures_and_stalled_writes_as_failing_since_they_began() -> None:
    clock = ManualClock(100.0)
    health = WriteHealth(stall_s=1.0, clock=clock)
    ok = health.begin(KEY)
    clock.now = 100.01
    health.end(ok, WriteOutcome.OK)
    stuck = health.begin(KEY)  # a stopped broker: no answer at all
    clock.now = 100.5
    [first] = health.reports("a")
    assert (first.ok, first.failed, first.failing_since) == (1, 0, None)
    assert first.p99_ms is not None and 9 < first.p99_ms < 11
    clock.now = 103.0
    [second] = health.reports("a")
    assert second.failing_since == 100.01 and second.ok == 0  # counters start again
    health.end(stuck, WriteOutcome.FAILED)
    later = health.begin(KEY)
    clock.now = 103.1
    health.end(later, WriteOutcome.OK)
    [healed] = health.reports("a")
    assert healed.failing_since is None and healed.last_ok_at == 103.1 and healed.failed == 1


def test_refusals_for_the_message_s_own_sake_count_for_nothing() -> None:
    clock = ManualClock(100.0)
    health = WriteHealth(clock=clock)
    health.end(health.begin(KEY), WriteOutcome.NEUTRAL)
    [r] = health.reports("a")
    assert (r.ok, r.failed, r.failing_since) == (0, 0, None)
    clock.now += 11  # idle past idle_s: no report any more
    assert health.reports("a") == []


def test_unhealthy_only_once_writes_failed_long_enough_across_producers() -> None:
    judge = HealthJudge(Detection(fail_after_s=5.0))
    failing = report("a", 110.0, failing_since=104.0)
    assert judge.verdict(KEY, [failing], 108.0) is None
    assert "failed for 6.0s" in (judge.verdict(KEY, [failing], 110.0) or "")
    # another producer still writes: the failure began at its last success
    writing = report("b", 110.0, last_ok_at=107.0)
    assert judge.verdict(KEY, [failing, writing], 110.0) is None
    assert judge.verdict(KEY, [failing, writing], 112.0) is not None
    # stale reports say nothing
    assert judge.verdict(KEY, [failing], 120.0) is None


def test_the_latency_trigger_is_off_by_default_and_needs_a_lasting_slow_tail() -> None:
    slow = report("a", 100.0, ok=50, p99_ms=900.0, last_ok_at=100.0)
    assert HealthJudge(Detection()).verdict(KEY, [slow], 100.0) is None
    judge = HealthJudge(Detection(latency_p99_ms=500, latency_for_s=3))
    assert judge.verdict(KEY, [slow], 100.0) is None
    assert judge.verdict(KEY, [slow.model_copy(update={"at": 102.0})], 102.0) is None
    fast = slow.model_copy(update={"at": 102.5, "p99_ms": 20.0})
    assert judge.verdict(KEY, [fast], 102.5) is None  # the bound held again: start over
    for at in (103.0, 105.0):
        verdict = judge.verdict(KEY, [slow.model_copy(update={"at": at})], at)
    assert verdict is None
    verdict = judge.verdict(KEY, [slow.model_copy(update={"at": 106.0})], 106.0)
    assert verdict is not None and verdict.startswith("write latency p99 900 ms")


T0 = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUTS = Timeouts(prepare_s=30, switch_s=5, complete_s=10, failover_phase_s=2)


def clock(seconds: float = 0) -> Clock:
    return Clock(T0 + timedelta(seconds=seconds), TIMEOUTS)


def test_a_failover_commits_without_the_seal_and_leaves_the_old_segment_unsealed() -> None:
    out = begin("f1", "p", "t", 1, 2, "pulsar-main", 2, "st2", live={"a", "b"}, clock=clock(),
                failover="kafka-main unhealthy")  # fmt: skip
    assert out.actions == (CreateTarget(),) and out.state.failover
    assert out.state.deadline == T0 + timedelta(seconds=2)  # not the planned 30 s
    state = step(out.state, TargetReady(), clock()).state
    state = step(state, Acked("a", Phase.PREPARE), clock()).state
    state = step(state, Acked("b", Phase.PREPARE), clock()).state
    state = step(state, Acked("a", Phase.SWITCH), clock(0.1)).state
    # "b" is cut off and stays silent: the failover goes on at its deadline, noting it
    assert step(state, Tick(), clock(1)).state.phase is Phase.SWITCH
    committing = step(state, Tick(), clock(2.2))
    assert committing.state.phase is Phase.COMMIT
    assert committing.actions == (LeaveUnsealed(),)
    assert "went on without b" in (committing.state.error or "")
    # a new leader re-runs the commit, never a seal
    assert step(committing.state, Restarted(frozenset({"a"})), clock(3)).actions == (
        LeaveUnsealed(),
    )
    moved = step(committing.state, PointerMoved(), clock(3)).state
    assert moved.pointer_moved and moved.sealed_ends is None
    acked = step(moved, Acked("a", Phase.COMMIT), clock(3.1)).state
    assert acked.phase is Phase.COMMIT  # "b" may still answer, for failover_phase_s
    done = step(acked, Tick(), clock(5.1)).state
    assert done.phase is Phase.COMPLETE and done.public()["failover"] is True


def test_a_failover_whose_target_cannot_be_made_rolls_back() -> None:
    out = begin("f1", "p", "t", 1, 2, "pulsar-main", 2, "st2", live={"a"}, clock=clock(),
                failover="kafka-main unhealthy")  # fmt: skip
    assert step(out.state, Tick(), clock(3)).state.phase is Phase.ROLLED_BACK


class _Store:
    """A store whose produce answers with ``error`` (or stores, when None)."""

    def __init__(self, error: Exception | None) -> None:
        self.error = error
        self.stored: list[bytes] = []

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        if self.error is not None:
            raise self.error
        self.stored.append(record.value)
        return Produced(0, len(self.stored) - 1, 1)


def _topic(active: int) -> Topic:
    segments = tuple(
        Segment(id=i, cluster=c, backend="embedded", storage_topic=f"s{i}", partitions=1,
                state=SegmentState.ACTIVE if i == active else SegmentState.UNSEALED)
        for i, c in ((1, "old"), (2, "new"))
    )  # fmt: skip
    return Topic(
        project="p", name="t", segments=segments, produce_pointer=Pointer(segment_id=active)
    )


@pytest.mark.parametrize(
    ("error", "moved"),
    [
        (StorageUnavailable("purged", details={"stored": False}), True),
        (StorageUnavailable("timed out: may be stored"), False),
    ],
)
async def test_a_write_moves_to_the_new_segment_only_when_known_not_stored(
    error: StorageUnavailable, moved: bool
) -> None:
    old, new = _Store(error), _Store(None)
    health = WriteHealth()

    async def refresh(project: str, name: str) -> Topic:
        return _topic(active=2)

    writer = SegmentWriter({"old": old, "new": new}, refresh, health)  # type: ignore[dict-item]
    if moved:
        written = await writer.write(_topic(active=1), Record(b"m"))
        assert (written.segment_id, new.stored) == (2, [b"m"])
    else:
        with pytest.raises(StorageUnavailable):
            await writer.write(_topic(active=1), Record(b"m"))
        assert new.stored == []
    [report] = [r for r in health.reports("a") if r.segment == 1]
    assert report.failed == 1

"""The hourly report and the cutover verification on trails with known contents.

Hourly: per subscription and window the counts of every type (accepted fanned out to each
subscription of its topic), the failure rate's inputs (attempts without a 2xx, a missing status
included), and latency percentiles that are exactly those of the planted latencies; a delivered
event without ``produced_at_ms`` takes its message's accepted time.

Cutover: the messages planted on the wrong side of the seal, past the sealed end, and the
deliveries planted out of their group's order across the boundary are named exactly; a clean
group and messages that waited during SWITCH are not findings."""

from __future__ import annotations

from typing import Any

from core.audit import AuditCutover, AuditSubscription, AuditType, FindingKind
from spark.cutover import verify_cutovers
from spark.hourly import hourly_report
from spark.reconcile import subscriptions_frame
from tests.support.audit_events import SUB, T0, ev, frame

A, AT, D, F, R, DL = (
    AuditType.ACCEPTED,
    AuditType.ATTEMPTED,
    AuditType.DELIVERED,
    AuditType.FILTERED,
    AuditType.RETRIED,
    AuditType.DEAD_LETTERED,
)
HOUR = 3_600_000
H0 = T0 - T0 % HOUR  # an hour boundary


def test_hourly_report(spark: Any) -> None:
    subs = subscriptions_frame(
        spark,
        [
            AuditSubscription(name=SUB, topic_project="shop", topic="orders"),
            AuditSubscription(name="shop/audit", topic_project="shop", topic="orders"),
        ],
    )
    at = H0 - T0  # offsets relative to T0 for ev()
    events = []
    for i in range(100):  # hour 0: 100 messages, latency i+1 ms
        mid = f"m{i}"
        events += [ev(A, mid, at + 1_000 + i, produced_at_ms=H0 + 1_000 + i)]
        events += [ev(AT, mid, at + 1_001 + 2 * i, status=200)]
        events += [ev(D, mid, at + 1_000 + i + (i + 1), produced_at_ms=H0 + 1_000 + i)]
    events += [ev(AT, "f1", at + 5, status=503), ev(AT, "f2", at + 6)]  # failed: 503, no status
    events += [ev(R, "f1", at + 7), ev(DL, "f2", at + 8), ev(F, "x", at + 9)]
    events += [ev(A, "n1", at + HOUR + 10), ev(D, "n1", at + HOUR + 30)]  # hour 1, via accepted
    rows = {
        (r.window_start_ms, r.subscription): r for r in hourly_report(frame(spark, events), subs)
    }
    assert set(rows) == {(H0, SUB), (H0, "shop/audit"), (H0 + HOUR, SUB), (H0 + HOUR, "shop/audit")}
    first = rows[(H0, SUB)]
    assert (first.accepted, first.delivered, first.attempted, first.failed_attempts) == (
        100,
        100,
        102,
        2,
    )
    assert (first.retried, first.dead_lettered, first.filtered) == (1, 1, 1)
    assert (first.latency_p50_ms, first.latency_p95_ms, first.latency_p99_ms) == (50, 95, 99)
    assert first.failure_rate == 2 / 102
    assert rows[(H0, "shop/audit")].accepted == 100  # accepted counts for every subscription
    assert rows[(H0, "shop/audit")].delivered == 0
    second = rows[(H0 + HOUR, SUB)]
    assert (second.accepted, second.delivered, second.latency_p50_ms) == (1, 1, 20)


SEAL = 100_000  # offset from T0


def _cutover_trail() -> list[Any]:
    def acc(mid: str, at: int, seg: int, pos: int, group: str | None = None) -> Any:
        return ev(A, mid, at, segment=seg, partition=0, position=pos, group=group)

    def dlv(mid: str, at: int, seg: int, pos: int, group: str) -> Any:
        return ev(D, mid, at, segment=seg, partition=0, position=pos, group=group)

    e = []
    # g1: clean across the boundary (old 0,1 then new 0,1, delivered in order)
    e += [acc("g1-a", 10, 1, 0, "g1"), acc("g1-b", 20, 1, 1, "g1")]
    e += [acc("g1-c", SEAL + 10, 2, 0, "g1"), acc("g1-d", SEAL + 20, 2, 1, "g1")]
    e += [dlv("g1-a", 30, 1, 0, "g1"), dlv("g1-b", 40, 1, 1, "g1")]
    e += [dlv("g1-c", SEAL + 30, 2, 0, "g1"), dlv("g1-d", SEAL + 40, 2, 1, "g1")]
    # g2: the new segment's message delivered before the old one's last: an order break
    e += [acc("g2-a", 50, 1, 2, "g2"), acc("g2-b", SEAL + 50, 2, 2, "g2")]
    e += [dlv("g2-b", SEAL + 60, 2, 2, "g2"), dlv("g2-a", SEAL + 70, 1, 2, "g2")]
    # misplaced: old segment after the seal; new segment long before it; past the sealed end
    e += [acc("late-old", SEAL + 5_000, 1, 3), acc("early-new", SEAL - 60_000, 2, 3)]
    e += [acc("past-end", 60, 1, 10)]
    # waited during SWITCH: arrived 2 s before the seal, written to the new segment: fine
    e += [acc("switch-wait", SEAL - 2_000, 2, 4)]
    return e


def test_cutover_verification(spark: Any) -> None:
    cut = AuditCutover(
        project="shop",
        topic="orders",
        from_segment=1,
        to_segment=2,
        sealed_at_ms=T0 + SEAL,
        end_positions={0: 10},
    )
    other = cut.model_copy(update={"topic": "payments"})
    check, empty = verify_cutovers(frame(spark, _cutover_trail()), [cut, other])
    misplaced = sorted(f.message_id for f in check.findings if f.kind is FindingKind.MISPLACED)
    assert misplaced == ["early-new", "late-old", "past-end"]
    order = [f for f in check.findings if f.kind is FindingKind.ORDER]
    assert [(f.subscription, f.message_id) for f in order] == [(SUB, "g2-a")]
    assert "group g2" in order[0].detail
    assert (check.old_segment_messages, check.new_segment_messages) == (5, 5)
    assert check.groups_across == 2
    assert not check.ok
    assert empty.ok and empty.old_segment_messages == 0
    # An available-mode failover: placement is checked, order across it is not.
    (unordered,) = verify_cutovers(
        frame(spark, _cutover_trail()), [cut.model_copy(update={"check_order": False})]
    )
    kinds = {f.kind for f in unordered.findings}
    assert FindingKind.MISPLACED in kinds and FindingKind.ORDER not in kinds

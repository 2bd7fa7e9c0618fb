"""The arithmetic of the shared rate budget: shares by demand, and the bucket with debt."""

from __future__ import annotations

import pytest

from core.quotas import FLOOR, DebtBucket, LeaseReport, share


def _mps(report: LeaseReport) -> float:
    return report.demand_mps


def test_asks_that_fit_are_met_and_the_spare_is_split_evenly() -> None:
    reports = {"a": LeaseReport(demand_mps=60), "b": LeaseReport(demand_mps=20)}
    a, b = (share(100, m, reports, _mps) for m in ("a", "b"))
    assert a + b == pytest.approx(100)
    floor = 100 * FLOOR / 2
    spare = 100 - 2 * floor - 80
    assert (a, b) == pytest.approx((floor + 60 + spare / 2, floor + 20 + spare / 2))


def test_a_member_asking_less_than_an_even_split_gets_all_it_asks() -> None:
    """Max-min fair: the small ask is met in full, the big ones share what is left. Shares
    in proportion to demand gave 30 of 80 about 27 here, less than it had just used."""
    reports = {m: LeaseReport(demand_mps=d) for m, d in (("a", 30), ("b", 500), ("c", 90))}
    shares = {m: share(100, m, reports, _mps) for m in reports}
    floor = 100 * FLOOR / 3
    assert shares["a"] == pytest.approx(floor + 30)
    assert shares["b"] == pytest.approx(shares["c"])
    assert sum(shares.values()) == pytest.approx(100)


def test_demand_above_the_quota_weighs_as_the_quota() -> None:
    """Two members that both ask for more than there is split it evenly, however noisy
    their asking (a client retrying 429s at once counts as demand too)."""
    reports = {"a": LeaseReport(demand_mps=5_000), "b": LeaseReport(demand_mps=120)}
    assert share(100, "a", reports, _mps) == pytest.approx(50)


def test_without_demand_the_quota_is_split_evenly() -> None:
    reports = {m: LeaseReport() for m in ("a", "b", "c", "d")}
    assert [share(80, m, reports, _mps) for m in reports] == pytest.approx([20] * 4)


def test_a_newcomer_gets_its_floor_not_the_whole_quota() -> None:
    reports = {"busy": LeaseReport(demand_mps=1_000)}
    new = share(100, "new", reports, _mps)
    assert 0 < new < 100 * FLOOR
    assert new + share(100, "busy", {**reports, "new": LeaseReport()}, _mps) == pytest.approx(100)


def test_alone_a_member_gets_the_whole_quota() -> None:
    assert share(50, "a", {}, _mps) == pytest.approx(50)
    assert share(50, "a", {"a": LeaseReport(demand_mps=7)}, _mps) == pytest.approx(50)


def test_the_bucket_holds_its_rate_and_a_burst_of_a_quarter_second() -> None:
    bucket = DebtBucket(rate=100, burst_s=0.25, now=0.0)
    taken = sum(1 for _ in range(1_000) if bucket.take(1, 0.0) == 0.0)
    assert taken == 25
    # One simulated second of asking every millisecond: the rate, not more.
    taken = sum(1 for ms in range(1, 1_001) if bucket.take(1, ms / 1000) == 0.0)
    assert taken == pytest.approx(100, abs=1)


def test_a_batch_larger_than_the_burst_passes_into_debt_that_is_paid_by_waiting() -> None:
    bucket = DebtBucket(rate=10, burst_s=0.25, now=0.0)
    assert bucket.take(50, 0.0) == 0.0  # 2.5 tokens were enough to start it
    wait = bucket.take(1, 0.0)
    assert wait == pytest.approx((1 + 47.5) / 10)  # 47.5 of debt, then one token
    assert bucket.take(1, 4.9) == 0.0


def test_a_new_share_keeps_the_debt_and_caps_the_savings() -> None:
    bucket = DebtBucket(rate=100, burst_s=0.25, now=0.0)
    bucket.retune(8, now=0.0)
    assert bucket.burst == pytest.approx(2)
    assert bucket.take(2, 0.0) == 0.0
    assert bucket.take(1, 0.0) == pytest.approx(1 / 8)

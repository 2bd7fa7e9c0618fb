"""A subscription's figures over its runners (:class:`delivery_workers.stats.Totals`): the
copy taken when only a live runner counts is the same as the sum, and a snapshot."""

from __future__ import annotations

from delivery_workers.stats import COUNTERS, GAUGES, RunnerStats, Totals

FIELDS = (*COUNTERS, *GAUGES, "failures", "last_failure")


def _busy() -> RunnerStats:
    stats = RunnerStats(
        delivered=7, attempts=9, failed_attempts=2, delayed=3, in_flight=4, lag=11, segment=2
    )
    stats.circuit_state, stats.circuit_rate = "half_open", 2.5
    stats.failures = {"500": 2}
    stats.last_failure = {"at_ms": 5, "status": 500, "error": None, "answer": "no"}
    return stats


def test_a_live_runner_alone_is_copied_as_the_sum_would_be() -> None:
    totals, live = Totals(), _busy()
    fast = totals.combined("p/s", live)
    summed = Totals._summed(None, live)
    assert {f: getattr(fast, f) for f in FIELDS} == {f: getattr(summed, f) for f in FIELDS}
    assert fast.delayed == 3  # a gauge: shown while the runner runs
    live.delivered += 1
    live.failures["500"] += 1
    assert fast.delivered == 7 and fast.failures == {"500": 2}  # a snapshot


def test_an_earlier_runners_counts_are_added() -> None:
    totals, first = Totals(), _busy()
    totals.fold("p/s", first)
    now = RunnerStats(delivered=1, in_flight=1)
    now.failures = {"timeout": 1}
    now.last_failure = {"at_ms": 9, "status": None, "error": "timeout", "answer": None}
    both = totals.combined("p/s", now)
    assert both.delivered == 8 and both.attempts == 9 and both.in_flight == 1
    assert both.failures == {"500": 2, "timeout": 1}
    assert both.last_failure == now.last_failure and both.delayed == 0
    stopped = totals.combined("p/s", None)  # no runner now: the gauges are the defaults
    assert stopped.delivered == 7 and stopped.in_flight == 0 and stopped.lag is None

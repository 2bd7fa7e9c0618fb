"""The circuit breaker, the limiter and the governor driven by a scripted clock."""

from __future__ import annotations

import pytest

from circuit_breaker import (
    AdaptiveRateLimiter,
    BreakerConfig,
    CallError,
    CallOutcome,
    CircuitBreaker,
    CircuitState,
    Governor,
    GovernorConfig,
    LimiterConfig,
    SlidingWindow,
    is_failure,
)

CONFIG = BreakerConfig(
    failure_rate_threshold=0.5, window_s=10, min_calls=4, cooldown_s=5, probe_per_s=2
)


def _trip(cb: CircuitBreaker, at: float = 0.0) -> None:
    for i in range(4):
        cb.record(at + i * 0.01, failed=True)
    assert cb.state is CircuitState.OPEN


def test_the_default_classifier() -> None:
    assert is_failure(CallOutcome(status=500))
    assert is_failure(CallOutcome(status=503, retry_after_s=1))
    assert is_failure(CallOutcome(error=CallError.TIMEOUT))
    assert is_failure(CallOutcome(error=CallError.CONNECTION))
    assert is_failure(CallOutcome(status=429))
    assert not is_failure(CallOutcome(status=429, retry_after_s=3))
    assert not is_failure(CallOutcome(status=404))
    assert not is_failure(CallOutcome(status=204))


def test_the_window_forgets_what_is_older_than_its_span() -> None:
    w = SlidingWindow(10, buckets=10)
    for t in range(10):
        w.add(float(t), failed=t < 5)
    assert (w.calls(9.5), w.failures(9.5)) == (10, 5)
    assert (w.calls(16.0), w.failures(16.0)) == (4, 0)  # t=0..5 left (1 s bucket slack)
    assert w.failure_rate(100.0) == 0.0


def test_needs_min_calls_and_the_threshold_to_trip() -> None:
    cb = CircuitBreaker(CONFIG, now=0)
    for i in range(3):
        assert cb.record(i, failed=True) == ()
    assert cb.state is CircuitState.CLOSED  # 100 % but only 3 calls
    cb = CircuitBreaker(CONFIG, now=0)
    for i in range(6):
        cb.record(i * 0.1, failed=i % 3 == 2)  # 2 of 6 fail: 33 %
    assert cb.state is CircuitState.CLOSED
    (change,) = cb.record(0.7, failed=True) + cb.record(0.8, failed=True)  # 4 of 8: 50 %
    assert (change.from_state, change.to_state) == (CircuitState.CLOSED, CircuitState.OPEN)
    assert change.failure_rate == 0.5 and "50% of 8 calls" in change.reason


def test_trip_probe_half_open_close() -> None:
    cb = CircuitBreaker(CONFIG, now=0)
    _trip(cb)
    # OPEN: probes only, 0.5 s apart, the first one interval after the trip.
    assert cb.admit(0.1) == pytest.approx(0.43)
    assert cb.admit(0.53) == 0.0
    assert cb.admit(0.6) > 0
    assert cb.admit(1.03) == 0.0
    cb.record(1.1, failed=True)  # a failed probe: the cool-down starts again
    assert cb.tick(5.5) == () and cb.state is CircuitState.OPEN
    (half,) = cb.tick(6.1)
    assert (half.from_state, half.to_state) == (CircuitState.OPEN, CircuitState.HALF_OPEN)
    assert cb.admit(6.1) == 0.0 and cb.admit(6.2) > 0  # half-open: still the probe rate
    assert cb.record(6.2, failed=False) == ()
    assert cb.record(6.7, failed=False) == ()
    (closed,) = cb.record(7.2, failed=False)
    assert closed.to_state is CircuitState.CLOSED
    assert cb.window.calls(7.2) == 0  # the outage's failures do not trip it again
    assert cb.admit(7.2) == 0.0 and cb.admit(7.2) == 0.0


def test_a_failed_half_open_probe_opens_again() -> None:
    cb = CircuitBreaker(CONFIG, now=0)
    _trip(cb)
    cb.tick(5.1)
    assert cb.state is CircuitState.HALF_OPEN
    cb.record(5.2, failed=False)
    (change,) = cb.record(5.3, failed=True)
    assert (change.from_state, change.to_state) == (CircuitState.HALF_OPEN, CircuitState.OPEN)
    assert cb.tick(10.2) == () and cb.tick(10.4)[0].to_state is CircuitState.HALF_OPEN


def test_the_rate_falls_under_failure_and_recovers() -> None:
    lim = AdaptiveRateLimiter(LimiterConfig(floor_per_s=2, max_per_s=100), now=0)
    rates = []
    t = 0.0
    for second in range(12):
        for i in range(10):
            lim.record(t + i * 0.05, failed=second < 6)
        t += 1
        lim.advance(t)
        rates.append(lim.rate)
    falling, rising = rates[:6], rates[6:]
    assert falling == sorted(falling, reverse=True) and falling[-1] == 2.0  # to the floor
    assert rising == sorted(rising) and rising[-1] > 80
    lim.advance(t + 60)  # a quiet minute closes the gap
    assert lim.rate == pytest.approx(100, rel=1e-3)


def test_the_limiter_paces_at_its_rate() -> None:
    lim = AdaptiveRateLimiter(LimiterConfig(floor_per_s=1, max_per_s=10, burst_s=0.1), now=0)
    admitted, t = 0, 0.0
    for _ in range(1_000):  # bounded: a pacing bug must fail, not hang
        if t >= 5.0:
            break
        wait = lim.take(t)
        admitted += wait == 0.0
        t += wait if wait else 0.0
    assert 49 <= admitted <= 51


def test_the_governor_throttles_trips_probes_and_ramps_back_up() -> None:
    config = GovernorConfig(CONFIG, floor_per_s=2, max_per_s=50)
    gov = Governor(config, now=0)
    fail, ok = CallOutcome(status=500), CallOutcome(status=200)
    assert gov.snapshot(0).rate_per_s == 50
    changes = [c for i in range(4) for c in gov.record(fail, i * 0.1)]
    assert [c.to_state for c in changes] == [CircuitState.OPEN]
    snap = gov.snapshot(1.0)
    assert (snap.state, snap.rate_per_s, snap.failure_rate) == (CircuitState.OPEN, 2.0, 1.0)
    assert gov.permit(1.0) == 0.0 and gov.permit(1.1) > 0  # probes at 2/s
    assert gov.poll(6.0)[0].to_state is CircuitState.HALF_OPEN
    closing = [c for i in range(3) for c in gov.record(ok, 6 + i * 0.5)]
    assert [c.to_state for c in closing] == [CircuitState.CLOSED]
    assert gov.snapshot(7.0).rate_per_s == 2.0  # back at the floor ...
    t = 7.0
    for _ in range(10):
        gov.record(ok, t)
        t += 1.0
    assert gov.snapshot(t).rate_per_s > 45  # ... and climbing back towards the max


def test_a_custom_classifier_decides_what_fails() -> None:
    gov = Governor(
        GovernorConfig(CONFIG, floor_per_s=2), now=0, classifier=lambda o: o.status == 404
    )
    for i in range(4):
        gov.record(CallOutcome(status=503), i)
    assert gov.state is CircuitState.CLOSED
    for i in range(4):
        gov.record(CallOutcome(status=404), 4 + i)
    assert gov.state is CircuitState.OPEN


@pytest.mark.parametrize(
    "kwargs",
    [
        {"failure_rate_threshold": 1.5},
        {"failure_rate_threshold": 0.0},
        {"min_calls": 0},
        {"probe_per_s": 0},
        {"window_s": -1},
    ],
)
def test_nonsense_breaker_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        BreakerConfig(**kwargs)  # type: ignore[arg-type]


def test_a_floor_above_the_max_or_a_probe_above_the_floor_is_refused() -> None:
    with pytest.raises(ValueError, match="floor"):
        LimiterConfig(floor_per_s=10, max_per_s=5)
    with pytest.raises(ValueError, match="probe_per_s <= floor_per_s"):
        GovernorConfig(CONFIG, floor_per_s=1)  # probes at 2/s


def test_failures_without_a_call_open_a_circuit_that_too_few_calls_would_not() -> None:
    """Issue 39: a grouped subscription's few heads fail every call, fewer than min_calls
    in a window; the messages sidelined behind them count as failed calls and open it."""
    cb = CircuitBreaker(CONFIG, now=0.0)
    cb.record(0.1, failed=True)
    cb.record(0.2, failed=True)  # 2 calls, all failed: below min_calls (4)
    assert cb.state is CircuitState.CLOSED
    (change,) = cb.record_unattempted(0.3, 5)
    assert change.to_state is CircuitState.OPEN
    assert cb.window.calls(0.3) == 7 and cb.window.failures(0.3) == 7


def test_failures_without_a_call_weigh_against_the_windows_successes() -> None:
    """One poisoned group of a busy subscription does not open it: its sidelined followers
    are failures among the window's many successes."""
    cb = CircuitBreaker(CONFIG, now=0.0)
    for i in range(30):
        cb.record(i * 0.01, failed=False)
    assert cb.record_unattempted(0.5, 10) == ()
    assert cb.state is CircuitState.CLOSED
    assert cb.record_unattempted(0.6, 0) == ()  # nothing sidelined: nothing counted
    assert cb.window.calls(0.6) == 40


def test_failures_without_a_call_keep_an_open_circuit_cooling_and_reopen_a_half_open_one() -> None:
    cb = CircuitBreaker(CONFIG, now=0.0)
    _trip(cb)
    cb.record_unattempted(4.0, 3)  # cooldown (5 s) starts again at 4.0
    assert cb.tick(8.0) == () and cb.state is CircuitState.OPEN
    (half,) = cb.tick(9.1)
    assert half.to_state is CircuitState.HALF_OPEN
    (again,) = cb.record_unattempted(9.2, 1)
    assert again.to_state is CircuitState.OPEN


def test_the_governor_counts_sidelined_messages_for_the_breaker_not_the_rate() -> None:
    gov = Governor(GovernorConfig(CONFIG, floor_per_s=2, max_per_s=100), now=0.0)
    rate = gov.limiter.rate
    changes = gov.record_unattempted(10, 0.1)
    assert [c.to_state for c in changes] == [CircuitState.OPEN]
    gov.limiter.advance(1.5)
    assert gov.limiter.rate >= rate  # the limiter saw no failed call


def test_the_window_counts_many_calls_at_once() -> None:
    w = SlidingWindow(10.0)
    w.add(0.0, failed=True, count=3)
    w.add(1.0, failed=False, count=2)
    assert (w.calls(5.0), w.failures(5.0)) == (5, 3)
    assert w.calls(30.0) == 0

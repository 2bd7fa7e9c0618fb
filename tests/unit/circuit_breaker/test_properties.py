"""Invariants of the governor under any sequence of calls, outcomes and clock steps."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from circuit_breaker import (
    BreakerConfig,
    CallOutcome,
    CircuitState,
    Governor,
    GovernorConfig,
)

OK, FAIL = CallOutcome(status=200), CallOutcome(status=503)

configs = st.builds(
    lambda threshold, window, min_calls, cooldown, probe, extra, span, close_after: GovernorConfig(
        BreakerConfig(threshold, window, min_calls, cooldown, probe, close_after),
        floor_per_s=probe + extra,
        max_per_s=probe + extra + span,
    ),
    st.floats(0.05, 1.0),
    st.floats(0.5, 60.0),
    st.integers(1, 50),
    st.floats(0.0, 30.0),
    st.floats(0.05, 20.0),
    st.floats(0.0, 100.0),
    st.floats(0.0, 5_000.0),
    st.integers(1, 5),
)
# One step: advance the clock by dt, then ask for a permit and/or record an outcome.
steps = st.lists(
    st.tuples(
        st.floats(0.0, 5.0),
        st.sampled_from(["permit", "ok", "fail", "permit+fail", "permit+ok"]),
    ),
    max_size=300,
)


Asked = tuple[float, bool, CircuitState]


def _drive(gov: Governor, script: list[tuple[float, str]], t: float = 0.0) -> list[Asked]:
    """Run the script; answer (time, admitted, state then) for every permit asked, checking
    after every step that the rate stays within [floor, max]."""
    asked = []
    for dt, op in script:
        t += dt
        if op.startswith("permit"):
            admitted = gov.permit(t) == 0.0
            asked.append((t, admitted, gov.state))
        if op.endswith("ok"):
            gov.record(OK, t)
        elif op.endswith("fail"):
            gov.record(FAIL, t)
        assert gov.config.floor_per_s <= gov.limiter.rate <= gov.config.max_per_s
    return asked


@settings(max_examples=200, deadline=None)
@given(configs, steps)
def test_the_rate_never_leaves_floor_and_max(config: GovernorConfig, script: list) -> None:
    gov = Governor(config, now=0.0)
    _drive(gov, script)  # asserts the bounds after every step
    snap = gov.snapshot(1e6)
    assert config.breaker.probe_per_s <= snap.rate_per_s <= config.max_per_s


@settings(max_examples=200, deadline=None)
@given(configs, steps)
def test_an_open_circuit_admits_no_more_than_the_probe_rate(
    config: GovernorConfig, script: list
) -> None:
    gov = Governor(config, now=0.0)
    asked = _drive(gov, script)
    gap = 1.0 / config.breaker.probe_per_s
    probes = [t for t, admitted, state in asked if admitted and state is not CircuitState.CLOSED]
    # Probes are at least one probe interval apart, so over any span of T seconds at most
    # floor(T * rate) + 1 of them pass ...
    assert all(b - a >= gap * (1 - 1e-9) for a, b in zip(probes, probes[1:], strict=False))
    # ... which, said directly for every window that starts at a probe:
    for i, start in enumerate(probes):
        for span in (gap / 2, gap, 3 * gap, 10 * gap):
            inside = sum(1 for t in probes[i:] if t <= start + span)
            assert inside <= math.floor(span * config.breaker.probe_per_s + 1e-9) + 1


@settings(max_examples=200, deadline=None)
@given(configs, steps, st.floats(0.001, 2.0))
def test_a_long_enough_run_of_successes_closes_the_circuit(
    config: GovernorConfig, script: list, latency: float
) -> None:
    gov = Governor(config, now=0.0)
    _drive(gov, script)
    t = sum(dt for dt, _ in script)
    b = config.breaker
    # Calls go when permitted and all succeed. Failures still in the window may yet trip it
    # (a low threshold), so: once the window has forgotten them, a cool-down plus enough
    # probes (and their latency) later, the circuit must be closed.
    probes = (b.close_after_successes + 2) * (1 / b.probe_per_s + latency)
    deadline = t + b.window_s * 1.05 + latency + b.cooldown_s + probes
    for _ in range(100_000):
        if t > deadline:
            break
        wait = gov.permit(t)
        if wait > 0:
            t += wait
            continue
        gov.record(OK, t + latency)
        t += latency
    assert gov.state is CircuitState.CLOSED, (gov.snapshot(t), t, deadline)

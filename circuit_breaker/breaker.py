"""A failure-rate circuit breaker over a sliding time window.

- **CLOSED**: every call is let through (pacing is the rate limiter's job) and counted in the
  window. Once the window holds at least ``min_calls`` calls and the failure rate reaches
  ``failure_rate_threshold``, the circuit opens.
- **OPEN**: only *probes* pass, spaced at least ``1 / probe_per_s`` apart, so over any span of
  *T* seconds at most ``floor(T * probe_per_s) + 1`` calls pass. Every failure seen while open
  (a probe, or a straggler sent before the trip) starts the cool-down again: the circuit stays
  open, probing, for as long as the endpoint keeps failing, instead of flapping to half-open
  and back every cool-down.
- **HALF_OPEN** after ``cooldown_s`` seconds without a failure: calls still pass at the probe
  rate; ``close_after_successes`` successes close the circuit (with an empty window), one
  failure opens it again.

**Failures without a call** (:meth:`CircuitBreaker.record_unattempted`): deliveries that a
failure decided without calling the endpoint — on a grouped subscription, the messages
queued behind a head that failed for good, which go to the DLQ unattempted. They count as
failed calls of the window (and as a failure while open or half open), so an endpoint that
fails every call still opens the circuit when ordering lets only a few calls through (a few
groups' heads, retried with a backoff: fewer calls in a window than ``min_calls``). Each
counts once, when the failure decides it; against the window's successes, so one poisoned
group of a busy subscription does not open it.

Every change of state is returned as a :class:`Transition` value, for the caller to log and
audit. Time is whatever the caller passes as ``now`` (seconds, non-decreasing).

Example::

    >>> cb = CircuitBreaker(BreakerConfig(min_calls=2, cooldown_s=5, probe_per_s=1), now=0.0)
    >>> cb.record(0.1, failed=True), cb.record(0.2, failed=True)[0].to_state
    ((), <CircuitState.OPEN: 'open'>)
    >>> cb.admit(0.5)  # seconds until the next probe may go
    0.7
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .window import SlidingWindow


class CircuitState(StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class Transition:
    """A change of state at ``at``, with why (``reason``) and the window's failure rate then."""

    at: float
    from_state: CircuitState
    to_state: CircuitState
    reason: str
    failure_rate: float


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_rate_threshold: float = 0.5
    window_s: float = 30.0
    min_calls: int = 20
    cooldown_s: float = 10.0
    probe_per_s: float = 1.0
    close_after_successes: int = 3

    def __post_init__(self) -> None:
        if not 0.0 < self.failure_rate_threshold <= 1.0:
            raise ValueError("failure_rate_threshold must be in (0, 1]")
        if self.window_s <= 0 or self.cooldown_s < 0 or self.probe_per_s <= 0:
            raise ValueError("window_s and probe_per_s must be positive, cooldown_s >= 0")
        if self.min_calls < 1 or self.close_after_successes < 1:
            raise ValueError("min_calls and close_after_successes must be at least 1")


class CircuitBreaker:
    """See the module doc. ``admit`` answers 0.0 when a call may go now (and counts it as a
    probe when not closed), else the seconds to wait before asking again."""

    def __init__(self, config: BreakerConfig, now: float) -> None:
        self.config = config
        self.state = CircuitState.CLOSED
        self.window = SlidingWindow(config.window_s)
        self._cool_until = now
        self._next_probe = now
        self._successes = 0

    def admit(self, now: float) -> float:
        self.tick(now)
        if self.state is CircuitState.CLOSED:
            return 0.0
        if now < self._next_probe:
            return self._next_probe - now
        self._next_probe = now + 1.0 / self.config.probe_per_s
        return 0.0

    def record(self, now: float, *, failed: bool, count: int = 1) -> tuple[Transition, ...]:
        """Count one call's outcome (or ``count`` alike); the transitions it (or the time
        passed) caused."""
        changes = self.tick(now)
        if self.state is CircuitState.CLOSED:
            self.window.add(now, failed=failed, count=count)
            calls, rate = self.window.calls(now), self.window.failure_rate(now)
            if calls >= self.config.min_calls and rate >= self.config.failure_rate_threshold:
                reason = f"{rate:.0%} of {calls} calls failed in {self.config.window_s:g} s"
                changes += (self._open(now, reason),)
        elif self.state is CircuitState.OPEN:
            if failed:
                self._cool_until = now + self.config.cooldown_s
        elif failed:
            changes += (self._open(now, "a half-open probe failed"),)
        else:
            self._successes += 1
            if self._successes >= self.config.close_after_successes:
                reason = f"{self._successes} half-open probes succeeded"
                changes += (self._move(now, CircuitState.CLOSED, reason),)
                self.window.clear()
        return changes

    def record_unattempted(self, now: float, count: int) -> tuple[Transition, ...]:
        """``count`` deliveries a failure decided without a call (see the module doc): failed
        calls, for the window and the state."""
        if count < 1:
            return self.tick(now)
        return self.record(now, failed=True, count=count)

    def tick(self, now: float) -> tuple[Transition, ...]:
        """Apply what time alone changes: OPEN → HALF_OPEN once the cool-down is over."""
        if self.state is CircuitState.OPEN and now >= self._cool_until:
            self._successes = 0
            reason = f"no failure for {self.config.cooldown_s:g} s"
            return (self._move(now, CircuitState.HALF_OPEN, reason),)
        return ()

    def _open(self, now: float, reason: str) -> Transition:
        self._cool_until = now + self.config.cooldown_s
        self._next_probe = max(self._next_probe, now + 1.0 / self.config.probe_per_s)
        return self._move(now, CircuitState.OPEN, reason)

    def _move(self, now: float, to: CircuitState, reason: str) -> Transition:
        change = Transition(now, self.state, to, reason, self.window.failure_rate(now))
        self.state = to
        return change

"""The one facade a dispatcher uses: a circuit breaker and an adaptive rate limiter together.

- ``permit(now)``: seconds to wait before the next call may go (0.0: go now; the call is
  counted). CLOSED: paced by the adaptive rate; OPEN and HALF_OPEN: probes only, at the
  probe rate.
- ``record(outcome, now)``: what a call came to, judged by the failure classifier.
- ``record_unattempted(count, now)``: deliveries a failure decided without a call (a
  grouped subscription's messages sidelined behind a failed head): failures for the
  breaker (:class:`~.breaker.CircuitBreaker`), not for the rate, which paces calls.
- ``poll(now)``: the transitions not yet handed out (time alone may open a half-open door);
  ``record`` hands them out too. The caller logs and audits them.
- ``snapshot(now)``: state, current rate, window failure rate, for status and metrics.

When the circuit closes the rate starts again at the floor and climbs back as calls succeed,
so a healed endpoint is not hit with a full backlog at once.

Example::

    >>> gov = Governor(GovernorConfig(BreakerConfig(min_calls=3), floor_per_s=1, max_per_s=50),
    ...                now=0.0)
    >>> gov.permit(0.0)
    0.0
    >>> changes = [gov.record(CallOutcome(status=503), 0.1 * i) for i in range(3)]
    >>> gov.snapshot(0.3).state, gov.snapshot(0.3).rate_per_s
    (<CircuitState.OPEN: 'open'>, 1.0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .breaker import BreakerConfig, CircuitBreaker, CircuitState, Transition
from .limiter import AdaptiveRateLimiter, LimiterConfig
from .outcome import CallOutcome, FailureClassifier, is_failure


@dataclass(frozen=True, slots=True)
class GovernorConfig:
    """``max_per_s`` is the subscription's own limit (or a ceiling standing for none)."""

    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    floor_per_s: float = 1.0
    max_per_s: float = 10_000.0

    def __post_init__(self) -> None:
        # An open circuit probing faster than a closed one may ever be throttled is nonsense.
        if not self.breaker.probe_per_s <= self.floor_per_s <= self.max_per_s:
            raise ValueError("need probe_per_s <= floor_per_s <= max_per_s")

    def limiter(self) -> LimiterConfig:
        return LimiterConfig(
            floor_per_s=self.floor_per_s,
            max_per_s=self.max_per_s,
            failure_threshold=self.breaker.failure_rate_threshold,
        )


@dataclass(frozen=True, slots=True)
class Snapshot:
    """``rate_per_s``: calls a second allowed now (the probe rate unless closed)."""

    state: CircuitState
    rate_per_s: float
    failure_rate: float
    window_calls: int


class Governor:
    """See the module doc."""

    def __init__(
        self, config: GovernorConfig, now: float, classifier: FailureClassifier = is_failure
    ) -> None:
        self.config = config
        self.classifier = classifier
        self.breaker = CircuitBreaker(config.breaker, now)
        self.limiter = AdaptiveRateLimiter(config.limiter(), now)
        self._outbox: list[Transition] = []

    @property
    def state(self) -> CircuitState:
        return self.breaker.state

    def permit(self, now: float) -> float:
        self._note(self.breaker.tick(now), now)
        if self.breaker.state is CircuitState.CLOSED:
            return self.limiter.take(now)
        return self.breaker.admit(now)

    def record(self, outcome: CallOutcome, now: float) -> tuple[Transition, ...]:
        failed = self.classifier(outcome)
        if self.breaker.state is CircuitState.CLOSED:
            self.limiter.record(now, failed=failed)
        self._note(self.breaker.record(now, failed=failed), now)
        return self.poll(now)

    def record_unattempted(self, count: int, now: float) -> tuple[Transition, ...]:
        self._note(self.breaker.record_unattempted(now, count), now)
        return self.poll(now)

    def poll(self, now: float) -> tuple[Transition, ...]:
        self._note(self.breaker.tick(now), now)
        out, self._outbox = tuple(self._outbox), []
        return out

    def snapshot(self, now: float) -> Snapshot:
        self._note(self.breaker.tick(now), now)
        self.limiter.advance(now)
        closed = self.breaker.state is CircuitState.CLOSED
        return Snapshot(
            state=self.breaker.state,
            rate_per_s=self.limiter.rate if closed else self.config.breaker.probe_per_s,
            failure_rate=self.breaker.window.failure_rate(now),
            window_calls=self.breaker.window.calls(now),
        )

    def _note(self, changes: tuple[Transition, ...], now: float) -> None:
        for change in changes:
            if change.to_state is CircuitState.CLOSED:
                self.limiter.reset(now)
        self._outbox.extend(changes)

"""An adaptive rate limiter: multiplicative decrease on failures, Hermes-style gap closing.

Time is cut into intervals of ``interval_s``. At the end of each, the limiter looks at the
calls of that interval alone (it must react within a second, not a window):

- failure rate at or above ``failure_threshold``: the rate drops to ``decrease_factor`` times
  the *lower* of the current rate and the rate actually observed, so a limit far above the
  real throughput does not take many intervals to bite;
- otherwise (including an interval without calls): the rate closes ``increase_fraction`` of
  its gap to ``max_per_s``, quickly from far below and gently near the top.

The rate always stays within ``[floor_per_s, max_per_s]``. :meth:`take` paces calls at the
current rate with a small burst (a tenth of a second's worth, at least one call).

Example::

    >>> lim = AdaptiveRateLimiter(LimiterConfig(floor_per_s=1, max_per_s=100), now=0.0)
    >>> for i in range(10):
    ...     lim.record(0.5, failed=True)
    >>> lim.advance(1.0); lim.rate  # a failing interval: halved (from the observed 10/s)
    5.0
    >>> lim.advance(2.0); round(lim.rate, 2)  # a quiet one: 30 % of the gap to 100 closed
    33.5
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_CATCH_UP_INTERVALS = 200  # after this many quiet intervals the gap is closed anyway
_EPSILON = 1e-9


@dataclass(frozen=True, slots=True)
class LimiterConfig:
    floor_per_s: float
    max_per_s: float
    failure_threshold: float = 0.5
    interval_s: float = 1.0
    decrease_factor: float = 0.5
    increase_fraction: float = 0.3
    burst_s: float = 0.1

    def __post_init__(self) -> None:
        if not 0 < self.floor_per_s <= self.max_per_s:
            raise ValueError("need 0 < floor_per_s <= max_per_s")
        if not 0.0 < self.failure_threshold <= 1.0:
            raise ValueError("failure_threshold must be in (0, 1]")
        if not (0 < self.decrease_factor < 1 and 0 < self.increase_fraction <= 1):
            raise ValueError("decrease_factor must be in (0, 1), increase_fraction in (0, 1]")
        if self.interval_s <= 0 or self.burst_s < 0:
            raise ValueError("interval_s must be positive and burst_s not negative")


class AdaptiveRateLimiter:
    """See the module doc. Starts at ``max_per_s``."""

    def __init__(self, config: LimiterConfig, now: float) -> None:
        self.config = config
        self.rate = config.max_per_s
        self._interval_start = now
        self._calls = 0
        self._failures = 0
        self._tokens = self._burst()
        self._tokens_at = now

    def take(self, now: float) -> float:
        """0.0 when a call may go now (it is counted), else the seconds until one may."""
        self.advance(now)
        refill = max(0.0, now - self._tokens_at) * self.rate
        self._tokens = min(self._burst(), self._tokens + refill)
        self._tokens_at = max(self._tokens_at, now)
        if self._tokens >= 1.0 - _EPSILON:  # float dust must not ask for a 1e-17 s wait
            self._tokens = max(0.0, self._tokens - 1.0)
            return 0.0
        return (1.0 - self._tokens) / self.rate

    def record(self, now: float, *, failed: bool) -> None:
        self.advance(now)
        self._calls += 1
        self._failures += failed

    def advance(self, now: float) -> None:
        """Close every interval that ended by ``now`` and adjust the rate for each."""
        interval = self.config.interval_s
        if now < self._interval_start + interval:
            return
        self._adjust(self._calls, self._failures)
        self._calls = self._failures = 0
        quiet = min(int((now - self._interval_start) / interval) - 1, MAX_CATCH_UP_INTERVALS)
        for _ in range(max(quiet, 0)):
            self._adjust(0, 0)
        self._interval_start += interval * int((now - self._interval_start) / interval)

    def reset(self, now: float, rate: float | None = None) -> None:
        """Start over at ``rate`` (default: the floor) with a fresh interval."""
        self.rate = self._clamp(self.config.floor_per_s if rate is None else rate)
        self._interval_start, self._calls, self._failures = now, 0, 0
        self._tokens, self._tokens_at = min(self._tokens, self._burst()), now

    def _adjust(self, calls: int, failures: int) -> None:
        c = self.config
        if calls and failures / calls >= c.failure_threshold:
            observed = calls / c.interval_s
            self.rate = self._clamp(min(self.rate, observed) * c.decrease_factor)
        else:
            self.rate = self._clamp(self.rate + (c.max_per_s - self.rate) * c.increase_fraction)
        self._tokens = min(self._tokens, self._burst())

    def _clamp(self, rate: float) -> float:
        return min(self.config.max_per_s, max(self.config.floor_per_s, rate))

    def _burst(self) -> float:
        return max(1.0, self.rate * self.config.burst_s)

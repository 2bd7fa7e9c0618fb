"""A token bucket with an injected clock: ``rate`` tokens a second, at most ``burst`` saved."""

from __future__ import annotations

import time
from collections.abc import Callable


class TokenBucket:
    """``take(n)`` answers 0.0 when ``n`` tokens were taken, else the seconds until they
    would be there (nothing is taken then). Pure: the caller decides to wait or refuse."""

    def __init__(
        self, rate: float, burst: float | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = burst if burst is not None else rate
        self._clock = clock
        self._tokens = self.burst
        self._at = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._at) * self.rate)
        self._at = now

    def take(self, n: float = 1.0) -> float:
        self._refill()
        if n <= self._tokens:
            self._tokens -= n
            return 0.0
        if n > self.burst:  # can never fit: let it through once the bucket is full
            if self._tokens >= self.burst:
                self._tokens = 0.0
                return 0.0
            return (self.burst - self._tokens) / self.rate
        return (n - self._tokens) / self.rate

    def give_back(self, n: float) -> None:
        """Return ``n`` tokens taken for work that did not happen."""
        self._tokens = min(self.burst, self._tokens + n)

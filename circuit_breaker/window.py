"""A sliding time window of call counts, kept in a few fixed-width buckets.

Memory is bounded by the bucket count, not by the call rate: a subscription at 5 000 calls a
second costs as little as one at 1. The window covers between ``window_s`` and
``window_s + window_s / buckets`` seconds of history.

Example::

    >>> w = SlidingWindow(10.0)
    >>> w.add(0.0, failed=True); w.add(1.0, failed=False)
    >>> (w.calls(5.0), w.failures(5.0))
    (2, 1)
    >>> w.calls(30.0)  # both have left the window
    0
"""

from __future__ import annotations

from collections import deque


class SlidingWindow:
    """Counts of calls and failures over the last ``window_s`` seconds."""

    def __init__(self, window_s: float, buckets: int = 20) -> None:
        if window_s <= 0 or buckets < 1:
            raise ValueError("window_s must be positive and buckets at least 1")
        self.window_s = window_s
        self.width = window_s / buckets
        self._buckets: deque[list[float]] = deque()  # [start, calls, failures]
        self._calls = 0
        self._failures = 0

    def add(self, now: float, *, failed: bool, count: int = 1) -> None:
        """Count ``count`` calls (all failed or all not) at ``now``."""
        self._expire(now)
        start = now - now % self.width
        if not self._buckets or self._buckets[-1][0] < start:
            self._buckets.append([start, 0, 0])
        # A clock that steps back lands in the newest bucket rather than reordering history.
        bucket = self._buckets[-1]
        bucket[1] += count
        bucket[2] += count if failed else 0
        self._calls += count
        self._failures += count if failed else 0

    def calls(self, now: float) -> int:
        self._expire(now)
        return self._calls

    def failures(self, now: float) -> int:
        self._expire(now)
        return self._failures

    def failure_rate(self, now: float) -> float:
        """Failures over calls in the window; 0.0 when there were no calls."""
        calls = self.calls(now)
        return self._failures / calls if calls else 0.0

    def clear(self) -> None:
        self._buckets.clear()
        self._calls = self._failures = 0

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        while self._buckets and self._buckets[0][0] + self.width <= horizon:
            _, calls, failures = self._buckets.popleft()
            self._calls -= int(calls)
            self._failures -= int(failures)

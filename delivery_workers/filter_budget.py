"""The share of the worker's event loop one subscription's filter may take.

Filters run on the worker's event loop, between reads. One evaluation is bounded (the
producer's header limits bound what a filter sees, CEL stops a comprehension past 10 000
iterations; the worst measured is ~13 ms, bench/filters.py), but a backlog of such messages
would hold the loop for seconds and stall every other subscription of the worker. So each
subscription's reading charges its filter time to a :class:`FilterBudget`:

- after every ``slice_s`` of filter time it yields the loop, so no other task waits longer
  than about one slice plus one evaluation;
- it may use at most ``share`` of wall time over a burst of ``burst_s``; past that its reading
  sleeps until the debt is paid, so an expensive filter slows its own subscription only.

A cheap filter (5–10 µs) stays far below both at 10 000 messages a second.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

FILTER_SHARE = 0.5
BURST_S = 0.1
SLICE_S = 0.005


class FilterBudget:
    """Filter time of one subscription's reading (see the module doc)."""

    def __init__(
        self,
        share: float = FILTER_SHARE,
        burst_s: float = BURST_S,
        slice_s: float = SLICE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.share = share
        self.burst_s = burst_s
        self.slice_s = slice_s
        self.throttled_s = 0.0  # how long the reading slept to pay its filter's debt
        self._clock = clock
        self._credit = burst_s
        self._at = clock()
        self._since_yield = 0.0

    def timer(self) -> float:
        """Start timing one evaluation; pass the value to :meth:`spend`."""
        return time.perf_counter()

    async def spend(self, started: float) -> None:
        """Charge the evaluation begun at ``started``; yield or sleep as the budget says."""
        seconds = time.perf_counter() - started
        now = self._clock()
        refill = (now - self._at) * self.share
        self._credit = min(self.burst_s, self._credit + refill) - seconds
        self._at = now
        self._since_yield += seconds
        if self._credit < 0:
            wait = -self._credit / self.share
            self.throttled_s += wait
            self._since_yield = 0.0
            await asyncio.sleep(wait)
        elif self._since_yield >= self.slice_s:
            self._since_yield = 0.0
            await asyncio.sleep(0)

"""Delivery latency, from the moment httpbus accepted a message to its endpoint's 2xx.

One :class:`LatencyHistogram` per subscription, kept by the worker across its runners'
restarts and shown on ``/metrics`` as ``httpbus_delivery_latency_seconds`` (a Prometheus
histogram: cumulative buckets, sum and count). Retries, delays and pauses are in it: it
is the latency a receiver sees, not the last attempt's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass
class LatencyHistogram:
    counts: list[int] = field(default_factory=lambda: [0] * (len(BUCKETS_S) + 1))
    total_s: float = 0.0

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.counts[bisect.bisect_left(BUCKETS_S, seconds)] += 1
        self.total_s += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(upper bound, observations at or below it)`` per bucket, ``+Inf`` last."""
        out, running = [], 0
        for bound, count in zip((*map(str, BUCKETS_S), "+Inf"), self.counts, strict=True):
            running += count
            out.append((bound, running))
        return out

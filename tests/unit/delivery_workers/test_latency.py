"""The delivery latency histogram: buckets, cumulative counts, sum."""

from __future__ import annotations

from delivery_workers.latency import BUCKETS_S, LatencyHistogram


def test_observations_land_in_cumulative_buckets() -> None:
    h = LatencyHistogram()
    for seconds in (0.001, 0.005, 0.07, 3.0, 1_000.0, -1.0):
        h.observe(seconds)
    buckets = dict(h.cumulative())
    assert buckets["0.005"] == 3  # 0.001, 0.005 (an upper bound is inclusive) and -1 as 0
    assert buckets["0.1"] == 4 and buckets["5.0"] == 5 and buckets["+Inf"] == 6 == h.count
    assert len(buckets) == len(BUCKETS_S) + 1
    assert abs(h.total_s - 1_003.076) < 1e-9

"""The status loop and the operational events share one sample of the worker's figures."""

from __future__ import annotations

from delivery_workers.stats import RunnerStats
from delivery_workers.worker import StatsSample


def test_the_loops_share_a_sample_within_its_age_and_take_a_new_one_after() -> None:
    """Each loop computed every held subscription's figures each second on its own: a
    third of an idle worker's event loop at 2 000 subscriptions (bench/idle_subs.py)."""
    taken: list[int] = []
    now = [0.0]

    def stats() -> dict[str, RunnerStats]:
        taken.append(1)
        return {"shop/s": RunnerStats(delivered=len(taken))}

    sample = StatsSample(stats, max_age_s=0.9, clock=lambda: now[0])
    first = sample()
    now[0] = 0.5
    assert sample() is first  # the other loop, within the age: no new computation
    now[0] = 0.9
    assert sample()["shop/s"].delivered == 2  # as old as allowed: taken again
    assert len(taken) == 2

"""A runner's lag (messages of its consume segment not committed, sampled from the storage)
and the age of its oldest message read and not terminal yet, and their series on the
worker's /metrics."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import delivery_workers.runner
from delivery_workers.app import WorkerCollector
from delivery_workers.stats import RunnerStats
from delivery_workers.tracking import CommitPolicy
from tests.support.until import until
from tests.support.world import embedded_world, produce, start_runner, stop_runner, subscribe


async def test_lag_and_oldest_age_follow_an_endpoint_that_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery_workers.runner, "LAG_S", 0.05)
    async with embedded_world(tmp_path, partitions=2, grouped=False) as world:
        world.hook.open.clear()  # the endpoint holds every request
        sub = await subscribe(world)
        for i in range(30):
            await produce(world, f"m{i}", None)
        runner, task, sender = await start_runner(world, sub, CommitPolicy(every_s=0.05))
        try:
            await until(lambda: runner.stats.lag == 30, 10, "a lag of 30")
            oldest = await until(runner.oldest_unacked_ms, 10, "an oldest unacked message")
            assert time.time() * 1000 - oldest < 10_000
            world.hook.open.set()
            await until(lambda: runner.stats.lag == 0, 10, "no lag once delivered")
            assert runner.oldest_unacked_ms() is None
        finally:
            await stop_runner(task, sender)


class _Worker:
    """What the collector reads of a worker."""

    def __init__(self, stats: dict[str, RunnerStats]) -> None:
        self._stats, self.assigned, self.runners = stats, set(stats), stats

    def stats(self) -> dict[str, RunnerStats]:
        return self._stats


def test_metrics_show_lag_and_oldest_age() -> None:
    behind = RunnerStats(lag=42, oldest_unacked_ms=int(time.time() * 1000) - 90_000)
    idle = RunnerStats(lag=0)
    registry = CollectorRegistry()
    worker: Any = _Worker({"p/behind": behind, "p/idle": idle})
    registry.register(WorkerCollector(worker))
    text = generate_latest(registry).decode()
    assert 'httpbus_subscription_lag_messages{subscription="p/behind"} 42.0' in text
    assert 'httpbus_subscription_lag_messages{subscription="p/idle"} 0.0' in text
    age = next(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith(
            'httpbus_subscription_oldest_unacked_age_seconds{subscription="p/behind"}'
        )
    )
    assert 89 < age < 120
    assert 'httpbus_subscription_oldest_unacked_age_seconds{subscription="p/idle"} 0.0' in text

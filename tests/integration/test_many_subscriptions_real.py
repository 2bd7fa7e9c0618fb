"""500 subscriptions of one topic on one worker (real ZooKeeper and Kafka): one of them whose
endpoint answers after 5 s does not slow the others down (their delivery latency stays within
twice that of a run without it)."""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import pytest

from tests.support.delivery import DeliveryWorld, delivery_world
from tests.support.services import RealServices
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
FAST = [f"f{i}" for i in range(499)]
MESSAGES = 10


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))]


async def _round(world: DeliveryWorld, prefix: str) -> list[float]:
    """Produce MESSAGES half a second apart; every fast subscription's latency (seconds)."""
    accepted = {}
    for i in range(MESSAGES):
        mid = f"{prefix}{i}"
        accepted[mid] = await world.produce("fanout", b"x", {"X-Message-Id": mid})
        await asyncio.sleep(0.5)
    want = set(accepted)
    fast = set(FAST)

    def arrived() -> int:
        return sum(
            1 for r in world.hook.requests if r.path in fast and r.headers["X-Message-Id"] in want
        )

    await until(lambda: arrived() >= len(FAST) * MESSAGES, 180, f"round {prefix}")
    return [
        r.at - accepted[r.headers["X-Message-Id"]]
        for r in world.hook.requests
        if r.path in fast and r.headers["X-Message-Id"] in want
    ]


async def test_a_slow_endpoint_does_not_slow_the_other_499(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with delivery_world(
        real_services, unique, tmp_path, "kafka-main", status_interval_s=2.0, commit_every_s=1.0
    ) as world:
        world.hook.delay = lambda path: 5.0 if path == "slow" else 0.0
        await world.topic("fanout", partitions=1)
        gate = asyncio.Semaphore(16)

        async def subscribe(name: str, **fields: object) -> None:
            async with gate:
                await world.subscribe(name, "fanout", **fields)

        started = time.monotonic()
        await asyncio.gather(*(subscribe(n) for n in FAST), subscribe("slow", paused=True))
        await until(lambda: len(world.worker.runners) >= len(FAST), 180, "499 runners")
        print(f"\n500 subscriptions created and running in {time.monotonic() - started:.1f}s")
        await _round(world, "w")  # warm-up: connections made, every runner at the tail
        # The worker runs in pytest's process, whose heap holds what every earlier test left:
        # a full collection of it (seen: one stall of ~650 ms in CI, never in a fresh process)
        # is not what this test measures. Freeze it out of the collector for the two rounds.
        gc.collect()
        gc.freeze()
        try:
            without = await _round(world, "a")
            r = await world.cp.post("/v1/projects/shop/subscriptions/slow/start")
            assert r.status_code == 200
            await until(lambda: "shop/slow" in world.worker.runners, 30, "the slow runner")
            # Its backlog (rounds w and a) keeps it busy from its start: measure once it is
            # sending, so its start (internal topics, group reads) is not what is measured.
            await until(lambda: world.hook.on("slow"), 30, "the slow endpoint called")
            with_slow = await _round(world, "b")
        finally:
            gc.unfreeze()
        slow_seen = len(world.hook.on("slow"))
    figures = {
        name: (_pct(v, 50), _pct(v, 95), _pct(v, 99))
        for name, v in (("without the slow one", without), ("with the slow one", with_slow))
    }
    for name, (p50, p95, p99) in figures.items():
        print(
            f"499 fast subscriptions, {name}: p50 {p50 * 1000:.0f} ms, "
            f"p95 {p95 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms"
        )
    print(f"the slow endpoint received {slow_seen} requests meanwhile (5 s each)")
    assert slow_seen > 0
    base, slow = figures["without the slow one"], figures["with the slow one"]
    slack = 0.05  # seconds: scheduling noise of a shared 2-core machine
    assert slow[0] <= 2 * base[0] + slack
    assert slow[1] <= 2 * base[1] + slack

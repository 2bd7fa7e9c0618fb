"""Issue 38's receiver that answers with a 200 MB header, against a worker process on real
ZooKeeper and Kafka: before the answer limits, reading that header whole stalled the
worker's event loop for 9-13 s, its ZooKeeper session expired, it lost its locks and the
other subscriptions' deliveries stopped for about 70 s. Now each such answer is refused
within the head limit: the worker's ``/healthz`` stays fast, it keeps every lock, and a calm
subscription of the same worker keeps its pace (p99 against a quiet phase before)."""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import pytest

from control_plane.leaders.assigner import Assigner
from core.model import Endpoint, Subscription
from segments.protocol import Record
from tests.support.hook import SECRET
from tests.support.hostile import MB, hostile_endpoint, repeated
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
RATE = 50  # messages a second, to both subscriptions
PHASE_S = 8.0
HUGE = 200 * MB
HEALTH_POLL = """
import json, sys, time, httpx
url, until, got = sys.argv[1], float(sys.argv[2]), []
with httpx.Client() as client:
    while time.time() < until:
        started = time.perf_counter()
        assert client.get(url, timeout=30).status_code == 200
        got.append((time.time(), (time.perf_counter() - started) * 1000))
        time.sleep(0.1)
print(json.dumps(got))
"""


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else max(values, default=0)


class Probe:
    """Publishes ``RATE`` messages a second and polls the worker's ``/healthz`` and the two
    locks, recording when each message was published and how each poll went."""

    def __init__(self, world: ProcessWorld, port: int, member: str) -> None:
        self.world, self.port, self.member = world, port, member
        self.published: dict[str, float] = {}
        self.health_ms: list[tuple[float, float]] = []  # (when, how long)
        self.holders: set[str | None] = set()
        self.sent = 0

    async def publish(self, until: float) -> None:
        while time.time() < until:
            ids = [f"m{self.sent + i:06d}" for i in range(RATE // 10)]
            self.sent += len(ids)
            records = [Record(m.encode(), headers=(("x-message-id", m.encode()),)) for m in ids]
            now = time.time()
            await self.world.produce_many(records)
            self.published.update(dict.fromkeys(ids, now))
            await asyncio.sleep(0.1)  # a pace, not a synchronisation

    async def watch(self, until: float) -> None:
        """The locks from here; ``/healthz`` from a process of its own, so that this test's
        event loop (busy serving the hostile bytes) does not count as the worker's delay."""
        poll = await asyncio.create_subprocess_exec(
            sys.executable, "-c", HEALTH_POLL, f"http://127.0.0.1:{self.port}/healthz",
            str(until), stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        while time.time() < until:
            self.holders.add(await self.world.holder("calm"))
            await asyncio.sleep(0.1)  # a pace
        out, _ = await poll.communicate()
        self.health_ms += [(at, ms) for at, ms in json.loads(out)]

    def calm_latencies(self, start: float, end: float) -> list[float]:
        return [
            (r.at - self.published[r.id]) * 1000
            for r in self.world.hook.on("calm")
            if r.id in self.published and start <= self.published[r.id] < end
        ]


async def test_a_200_mb_header_hurts_no_other_delivery(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    answer = lambda: repeated(b"HTTP/1.1 200 OK\r\nX-Big: ", b"a", HUGE)  # noqa: E731
    async with (
        process_world(real_services, unique, tmp_path, session_timeout_s=4.0) as world,
        hostile_endpoint(answer) as hostile,
    ):
        await world.subscribe("calm")
        member = f"w-{unique}"
        [worker] = world.workers([member], commit_every_s=0.2, lock_retry_s=0.2)
        async with Assigner(world.meta, world.catalog, "cp-test", interval_s=0.5):
            await worker.ready()
            await world.all_held(["calm"])  # from here on, it must never change hands
            probe = Probe(world, worker.port, member)
            quiet_from = time.time()
            quiet_to = quiet_from + PHASE_S
            await asyncio.gather(probe.publish(quiet_to), probe.watch(quiet_to))
            await world.catalog.create_subscription(
                Subscription(
                    project="shop",
                    name="hostile",
                    topic_project="shop",
                    topic="orders",
                    endpoint=Endpoint(url=hostile.url),
                    signing_secret=SECRET,
                )
            )
            hostile_to = time.time() + PHASE_S * 1.5
            await asyncio.gather(probe.publish(hostile_to), probe.watch(hostile_to))
            await until(
                lambda: set(probe.published) <= set(world.hook.ids("calm")),
                60,
                "every message delivered to the calm subscription",
            )
    quiet = probe.calm_latencies(quiet_from, quiet_to)
    loud = probe.calm_latencies(quiet_to, hostile_to)
    health = [ms for at, ms in probe.health_ms if at >= quiet_to]
    health_quiet = [ms for at, ms in probe.health_ms if at < quiet_to]
    print(
        f"\nhostile answers served {hostile.requests}, {hostile.written / MB:.1f} MB written; "
        f"calm p99 quiet {_p99(quiet):.0f} ms ({len(quiet)}), with the hostile endpoint "
        f"{_p99(loud):.0f} ms ({len(loud)}); /healthz p99 quiet {_p99(health_quiet):.0f} ms, "
        f"with it {_p99(health):.0f} ms (max {max(health):.0f} ms); holders of calm seen "
        f"{probe.holders}"
    )
    assert hostile.requests > 0, "the hostile endpoint was never asked"
    log = worker.log.read_text().splitlines()
    lost = [line for line in log if "lost the lock" in line or "fenced off" in line]
    assert probe.holders == {member} and not lost, (probe.holders, lost)
    assert _p99(health) < 100, "the worker's /healthz was slow"
    assert _p99(loud) <= max(2 * _p99(quiet), _p99(quiet) + 100), "calm deliveries slowed"

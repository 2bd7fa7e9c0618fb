"""The circuit breaker against real Kafka and ZooKeeper: one in-process worker runs three
subscriptions of one topic of 5 000 messages, each limited to RATE deliveries a second:

- ``guarded`` (breaker on) and ``unguarded`` (breaker off) push to an endpoint that fails
  100 % for OUTAGE_S seconds, NORMAL_S seconds after the first delivery, then heals;
- ``healthy`` (breaker on) pushes to an endpoint that never fails.

Both outage subscriptions use the same retry budget (MAX_ATTEMPTS, fixed 1 s backoff), which a
plain retry loop burns in ~9 s of outage. The test prints attempts and deliveries per second
and checks: ``guarded``'s attempts fall to the probe rate within 10 s of the outage start; no
``guarded`` message exhausts its attempts while ``unguarded`` ones do; ``guarded`` gets back to
≥ 90 % of its normal throughput within 30 s of the healing and delivers every message;
``healthy`` keeps its throughput through the outage.

Until the DLQ lands the runner *parks* a message past its attempts (retries it at the longest
delay): the count of messages that reached MAX_ATTEMPTS is what the DLQ would have received.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest

from core.audit import AuditEvent, AuditType
from core.model import (
    Backend,
    CircuitBreakerPolicy,
    Endpoint,
    Project,
    RetryPolicy,
    Segment,
    SegmentState,
    Subscription,
    Topic,
)
from delivery_workers.app import WorkerCollector
from delivery_workers.fast_sender import FastSender
from delivery_workers.worker import Worker
from metastore import paths
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from metastore.protocol import MetaStore
from segments.config import KafkaClusterConfig
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from tests.conftest import RealServices

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
TOTAL = 5_000
RATE = 100.0  # each subscription's rate limit: its normal throughput
NORMAL_S, OUTAGE_S = 10.0, 30.0
PROBE_PER_S = 1.0
MAX_ATTEMPTS = 10
RETRY = RetryPolicy(
    max_attempts=MAX_ATTEMPTS, backoff="fixed", initial_delay_ms=1_000, max_delay_ms=2_000
)
BREAKER = CircuitBreakerPolicy(
    window_seconds=3,
    min_calls=10,
    cooldown_seconds=4,
    probe_per_second=PROBE_PER_S,
    floor_per_second=1.0,
)
SUBS = {
    "guarded": BREAKER,
    "unguarded": CircuitBreakerPolicy(enabled=False),
    "healthy": BREAKER,
}


@dataclass
class Hook:
    """The endpoints: ``/hook/{sub}``; subscriptions in ``failing`` get 503."""

    url: str = ""
    failing: set[str] = field(default_factory=set)
    # (monotonic time, subscription, message id, attempt, delivered)
    log: list[tuple[float, str, str, int, bool]] = field(default_factory=list)

    def delivered(self, sub: str) -> set[str]:
        return {mid for _, s, mid, _, ok in self.log if s == sub and ok}


class Audit:
    """Stands in for the audit sink: keeps the circuit events."""

    def __init__(self) -> None:
        self.events: list[AuditEvent] = []

    def emit(self, event: AuditEvent) -> None:
        if event.type is AuditType.CIRCUIT:
            self.events.append(event)


@pytest.fixture
async def hook() -> AsyncIterator[Hook]:
    state = Hook()

    async def receive(request: web.Request) -> web.Response:
        sub, mid = request.match_info["sub"], request.headers["X-Message-Id"]
        ok = sub not in state.failing
        state.log.append((time.monotonic(), sub, mid, int(request.headers["X-Attempt"]), ok))
        await asyncio.sleep(0.002)  # a real endpoint takes a moment
        return web.Response(status=204) if ok else web.Response(status=503, text="db down")

    app = web.Application()
    app.router.add_post("/hook/{sub}", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    state.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield state
    finally:
        await runner.cleanup()


def _per_second(times: list[float], start: float, end: float) -> list[int]:
    counts = Counter(int(t - start) for t in times if start <= t < end)
    return [counts.get(i, 0) for i in range(int(end - start))]


async def _setup(meta: MetaStore, store: SegmentStore, storage: str, url: str) -> None:
    catalog = Catalog(meta)
    await catalog.create_project(Project(name="shop"))
    await store.create_topic(storage, 4, retention_ms=3_600_000)
    segment = Segment(
        id=1,
        cluster="kafka-main",
        backend=Backend.KAFKA,
        storage_topic=storage,
        partitions=4,
        state=SegmentState.ACTIVE,
    )
    await catalog.create_topic(Topic(project="shop", name="orders"), segment)
    for name, breaker in SUBS.items():
        await catalog.create_subscription(
            Subscription(
                project="shop",
                name=name,
                topic_project="shop",
                topic="orders",
                endpoint=Endpoint(url=f"{url}/{name}"),
                signing_secret=SECRET,
                max_in_flight=20,
                rate_limit_per_second=RATE,
                retry=RETRY,
                circuit_breaker=breaker,
            )
        )
    for start in range(0, TOTAL, 500):
        records = [
            Record(b"{}", headers=(("x-message-id", f"m{i}".encode()),))
            for i in range(start, min(start + 500, TOTAL))
        ]
        results = await store.produce_many(storage, records)
        assert not [r for r in results if isinstance(r, Exception)]


Sample = tuple[float, dict[str, tuple[str | None, float | None, int]]]


@dataclass
class Run:
    """When each phase began (monotonic), what the worker showed along the way."""

    t0: float = 0.0  # the first delivery of ``guarded``
    outage: float = 0.0
    healed: float = 0.0
    done: float = 0.0  # ``guarded`` has every message
    samples: list[Sample] = field(
        default_factory=list
    )  # (when, sub -> (state, rate, dead-lettered))
    metrics: str = ""  # the worker's /metrics mid-outage


async def _sample(worker: Worker, run: Run) -> None:
    while True:
        stats = worker.stats()
        shown = {
            k.split("/")[1]: (s.circuit_state, s.circuit_rate, s.dead_lettered)
            for k, s in stats.items()
        }
        run.samples.append((time.monotonic(), shown))
        await asyncio.sleep(0.1)


async def _scenario(worker: Worker, hook: Hook) -> Run:
    run = Run()
    sampler = asyncio.create_task(_sample(worker, run))
    try:
        async with asyncio.timeout(30):
            while not hook.delivered("guarded"):
                await asyncio.sleep(0.05)
        run.t0 = time.monotonic()
        await asyncio.sleep(NORMAL_S)
        hook.failing = {"guarded", "unguarded"}
        run.outage = time.monotonic()
        await asyncio.sleep(OUTAGE_S / 2)
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker))
        run.metrics = generate_latest(registry).decode()
        await asyncio.sleep(OUTAGE_S / 2)
        hook.failing = set()
        run.healed = time.monotonic()
        async with asyncio.timeout(100):
            while len(hook.delivered("guarded")) < TOTAL:
                await asyncio.sleep(0.2)
        run.done = time.monotonic()
    finally:
        sampler.cancel()
    return run


async def test_outage_is_throttled_recovers_and_spares_the_retry_budget(
    real_services: RealServices, unique: str, hook: Hook
) -> None:
    zk = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/cb-{unique}")
    kafka = KafkaClusterConfig(bootstrap_servers=real_services.kafka)
    storage, member, audit = f"it.{unique}.cb", f"w-{unique}", Audit()
    async with open_metastore(zk) as meta, open_store(kafka) as store:
        try:
            await _setup(meta, store, storage, hook.url)
            async with (
                FastSender() as sender,
                Worker(
                    meta,
                    {"kafka-main": store},
                    sender,
                    member,
                    audit=audit,  # type: ignore[arg-type]
                    commit_every_s=0.5,
                    lock_retry_s=0.2,
                ) as worker,
            ):
                keys = [f"shop/{s}" for s in SUBS]
                await meta.create(paths.assignment(member), json.dumps(keys).encode())
                run = await _scenario(worker, hook)
        finally:
            for child in await meta.children("/"):
                await meta.delete(f"/{child}", recursive=True)
            await store.delete_topic(storage)
    _report_and_check(hook, audit, run)


def _print_table(run: Run, attempts: dict[str, list[int]], delivered: dict[str, list[int]]) -> None:
    t0 = run.t0
    state_at = {int(t - t0): subs.get("guarded", (None,))[0] for t, subs in run.samples if t >= t0}
    o, h = round(run.outage - t0), round(run.healed - t0)
    print(
        f"\n{'s':>4} {'phase':>7} | guarded: attempts delivered state | unguarded: attempts "
        f"| healthy: delivered"
    )
    for i in range(int(run.done - t0)):
        phase = "outage" if o <= i < h else ("healed" if i >= h else "normal")
        print(
            f"{i:>4} {phase:>7} | {attempts['guarded'][i]:>8} {delivered['guarded'][i]:>9} "
            f"{state_at.get(i) or '-':>9} | {attempts['unguarded'][i]:>8} "
            f"| {delivered['healthy'][i]:>8}"
        )


def _report_and_check(hook: Hook, audit: Audit, run: Run) -> None:
    t0, done, metrics_text = run.t0, run.done, run.metrics

    def times(sub: str, delivered: bool | None = None) -> list[float]:
        return [t for t, s, _, _, ok in hook.log if s == sub and delivered in (None, ok)]

    attempts = {s: _per_second(times(s), t0, done) for s in SUBS}
    delivered = {s: _per_second(times(s, True), t0, done) for s in SUBS}
    o, h = round(run.outage - t0), round(run.healed - t0)
    _print_table(run, attempts, delivered)
    opened = next(t for t, v in run.samples if v.get("guarded", (None,))[0] == "open") - run.outage

    # Normal throughput: the first NORMAL_S seconds less two of warm-up.
    warm = slice(2, int(NORMAL_S))
    normal = {s: sum(delivered[s][warm]) / (warm.stop - warm.start) for s in SUBS}
    # attempts of the guarded subscription from 10 s after the outage start to its end
    throttled = attempts["guarded"][o + 10 : h]
    exhausted = {
        s: len({mid for _, sub, mid, n, _ in hook.log if sub == s and n >= MAX_ATTEMPTS})
        for s in SUBS
    }
    parked_peak = {
        s: max((v.get(s, (0, 0, 0))[2] for _, v in run.samples), default=0) for s in SUBS
    }
    recovered = next(
        (
            i - h
            for i in range(h, len(delivered["guarded"]) - 2)
            if sum(delivered["guarded"][i : i + 3]) / 3 >= 0.9 * normal["guarded"]
        ),
        None,
    )
    healthy_outage = sum(delivered["healthy"][o:h]) / max(1, h - o)
    moves = [
        (e.circuit_from, e.circuit_to) for e in audit.events if e.subscription == "shop/guarded"
    ]
    duplicates = {s: len(times(s, True)) - len(hook.delivered(s)) for s in SUBS}
    print(
        f"normal throughput {normal} msg/s; guarded circuit open {opened:.1f} s into the outage; "
        f"guarded attempts/s from outage+10 s: {throttled} "
        f"(mean {sum(throttled) / max(1, len(throttled)):.2f}/s, probe rate {PROBE_PER_S}/s)\n"
        f"messages that reached {MAX_ATTEMPTS} attempts (would have been dead-lettered): "
        f"{exhausted}; peak dead-lettered {parked_peak}\n"
        f"guarded back to >= 90 % of normal {recovered} s after healing; "
        f"healthy during the outage {healthy_outage:.1f} msg/s vs normal {normal['healthy']:.1f}\n"
        f"guarded delivered {len(hook.delivered('guarded'))}/{TOTAL} "
        f"({done - t0:.0f} s in all), duplicates {duplicates}\ncircuit transitions {moves}"
    )
    assert throttled and max(throttled) <= PROBE_PER_S + 2
    assert sum(throttled) / len(throttled) <= PROBE_PER_S * 1.5
    assert exhausted["guarded"] == 0 and parked_peak["guarded"] == 0
    assert exhausted["unguarded"] > 0  # the same outage without the breaker burns the budget
    assert recovered is not None and recovered <= 30
    assert hook.delivered("guarded") == {f"m{i}" for i in range(TOTAL)}
    assert healthy_outage >= 0.9 * normal["healthy"]
    assert moves[0] == ("closed", "open") and moves[-1] == ("half_open", "closed")
    assert 'httpbus_circuit_state{state="open",subscription="shop/guarded"} 1.0' in metrics_text
    assert 'httpbus_circuit_rate_per_second{subscription="shop/guarded"} 1.0' in metrics_text
    assert "shop/unguarded" not in "".join(
        line for line in metrics_text.splitlines() if line.startswith("httpbus_circuit")
    )

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
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from core.audit import AuditType
from core.model import (
    CircuitBreakerPolicy,
    RetryPolicy,
)
from delivery_workers.app import WorkerCollector
from delivery_workers.worker import Worker
from segments.protocol import Record
from tests.support.hook import Hook
from tests.support.memory_audit import MemoryAudit
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, in_process_worker, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
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


def _delivered(hook: Hook, sub: str) -> set[str]:
    return set(hook.ids(sub))


def _log(hook: Hook) -> list[tuple[float, str, str, int, bool]]:
    """(time, subscription, message id, attempt, delivered) of every request."""
    return [
        (r.at, r.path, r.id, int(r.headers["X-Attempt"]), 200 <= r.status < 300)
        for r in hook.requests
    ]


def _per_second(times: list[float], start: float, end: float) -> list[int]:
    counts = Counter(int(t - start) for t in times if start <= t < end)
    return [counts.get(i, 0) for i in range(int(end - start))]


async def _setup(world: ProcessWorld) -> None:
    for name, breaker in SUBS.items():
        await world.subscribe(
            name,
            max_in_flight=20,
            rate_limit_per_second=RATE,
            retry=RETRY,
            circuit_breaker=breaker,
        )
    for start in range(0, TOTAL, 500):
        ids = [f"m{i}" for i in range(start, min(start + 500, TOTAL))]
        await world.produce_many(
            [Record(b"{}", headers=(("x-message-id", m.encode()),)) for m in ids]
        )


Sample = tuple[float, dict[str, tuple[str | None, float | None, int]]]


@dataclass
class Run:
    """When each phase began (time.time()), what the worker showed along the way."""

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
        run.samples.append((time.time(), shown))
        await asyncio.sleep(0.1)


async def _scenario(worker: Worker, hook: Hook) -> Run:
    run = Run()
    sampler = asyncio.create_task(_sample(worker, run))
    try:
        await until(lambda: _delivered(hook, "guarded"), 30, "the first delivery")
        run.t0 = time.time()
        await asyncio.sleep(NORMAL_S)  # the phases last their time, whatever happens
        hook.down = {"guarded", "unguarded"}
        run.outage = time.time()
        await asyncio.sleep(OUTAGE_S / 2)
        registry = CollectorRegistry()
        registry.register(WorkerCollector(worker))
        run.metrics = generate_latest(registry).decode()
        await asyncio.sleep(OUTAGE_S / 2)
        hook.down = set()
        run.healed = time.time()
        await until(lambda: len(_delivered(hook, "guarded")) >= TOTAL, 100, "every message")
        run.done = time.time()
    finally:
        sampler.cancel()
    return run


async def test_outage_is_throttled_recovers_and_spares_the_retry_budget(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    audit = MemoryAudit([AuditType.CIRCUIT])
    async with process_world(real_services, unique, tmp_path, session_timeout_s=None) as world:
        await _setup(world)
        member = f"w-{unique}"
        async with in_process_worker(world, member, list(SUBS), audit) as worker:  # type: ignore[arg-type]
            run = await _scenario(worker, world.hook)
    _report_and_check(world.hook, audit, run)


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


def _report_and_check(hook: Hook, audit: MemoryAudit, run: Run) -> None:
    t0, done, metrics_text = run.t0, run.done, run.metrics

    def times(sub: str, delivered: bool | None = None) -> list[float]:
        return [t for t, s, _, _, ok in _log(hook) if s == sub and delivered in (None, ok)]

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
        s: len({mid for _, sub, mid, n, _ in _log(hook) if sub == s and n >= MAX_ATTEMPTS})
        for s in SUBS
    }
    deepest = {s: max((n for _, sub, _, n, _ in _log(hook) if sub == s), default=0) for s in SUBS}
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
    duplicates = {s: len(times(s, True)) - len(_delivered(hook, s)) for s in SUBS}
    print(
        f"normal throughput {normal} msg/s; guarded circuit open {opened:.1f} s into the outage; "
        f"guarded attempts/s from outage+10 s: {throttled} "
        f"(mean {sum(throttled) / max(1, len(throttled)):.2f}/s, probe rate {PROBE_PER_S}/s)\n"
        f"messages that reached {MAX_ATTEMPTS} attempts (would have been dead-lettered): "
        f"{exhausted}; most attempts of one message {deepest}; peak dead-lettered {parked_peak}\n"
        f"guarded back to >= 90 % of normal {recovered} s after healing; "
        f"healthy during the outage {healthy_outage:.1f} msg/s vs normal {normal['healthy']:.1f}\n"
        f"guarded delivered {len(_delivered(hook, 'guarded'))}/{TOTAL} "
        f"({done - t0:.0f} s in all), duplicates {duplicates}\ncircuit transitions {moves}"
    )
    assert throttled and max(throttled) <= PROBE_PER_S + 2
    assert sum(throttled) / len(throttled) <= PROBE_PER_S * 1.5
    assert exhausted["guarded"] == 0 and parked_peak["guarded"] == 0
    # The same outage without the breaker keeps burning attempts at the rate limit's pace while
    # the guarded one probes. How many unguarded messages reach the last attempt within
    # OUTAGE_S depends on how the delay levels share that rate (0 to 5 in runs on a busy
    # machine, before and after the delivery core was reshaped), so the test asserts the rate
    # of spent attempts, not a count of exhausted messages.
    burning = attempts["unguarded"][o + 10 : h]
    assert sum(burning) / len(burning) >= 10 * PROBE_PER_S
    assert recovered is not None and recovered <= 30
    assert _delivered(hook, "guarded") == {f"m{i}" for i in range(TOTAL)}
    assert healthy_outage >= 0.9 * normal["healthy"]
    assert moves[0] == ("closed", "open") and moves[-1] == ("half_open", "closed")
    assert 'httpbus_circuit_state{state="open",subscription="shop/guarded"} 1.0' in metrics_text
    assert 'httpbus_circuit_rate_per_second{subscription="shop/guarded"} 1.0' in metrics_text
    assert "shop/unguarded" not in "".join(
        line for line in metrics_text.splitlines() if line.startswith("httpbus_circuit")
    )

"""The circuit breaker in the runner (embedded store, a real local endpoint): an outage opens
the circuit, attempts fall to the probe rate, messages in hand keep their retry budget, and
the subscription heals by itself; without the breaker the same outage exhausts attempts."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest

from circuit_breaker import CallError, CallOutcome, CircuitState, Governor
from core.audit import AuditType
from core.model import (
    CircuitBreakerPolicy,
    RetryPolicy,
    Subscription,
)
from core.result import DeliveryResult, ErrorKind
from delivery_workers.app import WorkerCollector
from delivery_workers.stats import RunnerStats
from delivery_workers.throttle import (
    UNLIMITED_PER_S,
    Throttle,
    call_outcome,
    governor_config,
)
from delivery_workers.tracking import CommitPolicy
from segments.reader import SegmentReader
from tests.support.memory_audit import MemoryAudit
from tests.support.until import until
from tests.support.world import (
    embedded_world,
    produce,
    start_runner,
    stop_runner,
    subscribe,
    subscription,
)

TOTAL = 60
PROBE_PER_S = 5.0
# Without a breaker this budget is gone 0.5 s into an outage.
RETRY = RetryPolicy(max_attempts=6, backoff="fixed", initial_delay_ms=100, max_delay_ms=300)
BREAKER = CircuitBreakerPolicy(
    window_seconds=2,
    min_calls=5,
    cooldown_seconds=1,
    probe_per_second=PROBE_PER_S,
    floor_per_second=PROBE_PER_S,
)


class WatchedReader(SegmentReader):
    """Notes the runner's circuit state each time a read starts."""

    stats: RunnerStats | None = None
    states: list[str | None]

    async def read(self, *args: Any, **kwargs: Any) -> Any:
        self.states.append(self.stats.circuit_state if self.stats else None)
        return await super().read(*args, **kwargs)


async def _outage(tmp_path: Path, breaker: CircuitBreakerPolicy) -> dict[str, Any]:
    """Deliver TOTAL messages through an outage of 2 s; what happened."""
    audit = MemoryAudit()
    failing = True
    async with embedded_world(tmp_path, partitions=1, grouped=False) as world:
        world.hook.behaviour = lambda mid, n: (503, {}) if failing else (204, {})
        sub = await subscribe(world, max_in_flight=5, retry=RETRY, circuit_breaker=breaker)
        for i in range(TOTAL):
            await produce(world, f"m{i}", None)
        reader = WatchedReader(world.catalog, world.stores)
        reader.states = []
        runner, task, sender = await start_runner(
            world, sub, CommitPolicy(every_n=10, every_s=0.2), reader=reader, audit=audit
        )
        reader.stats = runner.stats
        states, parked = set(), 0  # parked: dead-lettered during the outage
        try:
            outage_end = time.time() + 2.0
            while time.time() < outage_end:  # the outage lasts 2 s, whatever happens in it
                states.add(runner.stats.circuit_state)
                parked = max(parked, runner.stats.dead_lettered)
                await asyncio.sleep(0.02)
            failing = False
            await until(
                lambda: (
                    len(world.hook.got) + runner.stats.dead_lettered >= TOTAL
                    and runner.stats.circuit_state != "half_open"
                ),
                20,
                "every message delivered or dead-lettered, the circuit settled",
            )
        finally:
            await stop_runner(task, sender)
    return {
        "states": states,
        "parked": parked,
        "dead_lettered": runner.stats.dead_lettered,
        "outage_end": outage_end,
        "final": runner.stats.circuit_state,
        "events": [e for e in audit.events if e.type is AuditType.CIRCUIT],
        "reads": Counter(reader.states),
        "delivered": set(world.hook.delivered()),
        "attempts": [(r.at, r.id) for r in world.hook.requests],
    }


async def test_an_outage_opens_the_circuit_and_costs_no_retry_budget(tmp_path: Path) -> None:
    seen = await _outage(tmp_path, BREAKER)
    assert "open" in seen["states"]
    assert seen["parked"] == 0  # no message ran out of attempts
    assert seen["delivered"] == {f"m{i}" for i in range(TOTAL)}
    tries: dict[str, int] = {}
    for _, mid in seen["attempts"]:
        tries[mid] = tries.get(mid, 0) + 1
    assert max(tries.values()) < RETRY.max_attempts
    # Once open, attempts come at the probe rate (the last second of the outage).
    end = float(seen["outage_end"])
    late = [t for t, _ in seen["attempts"] if end - 1.0 <= t < end]
    assert len(late) <= PROBE_PER_S + 1, late
    moves = [(e.circuit_from, e.circuit_to) for e in seen["events"]]
    assert moves[0] == ("closed", "open") and moves[-1] == ("half_open", "closed")
    assert ("open", "half_open") in moves
    assert seen["final"] == "closed"
    reads = seen["reads"]
    assert reads["closed"] > 0 and reads["open"] == 0, reads  # open: nothing is pulled
    first = seen["events"][0]
    assert first.subscription == "p/s" and first.reason and first.failure_rate >= 0.5


async def test_without_the_breaker_the_same_outage_exhausts_attempts(tmp_path: Path) -> None:
    seen = await _outage(tmp_path, CircuitBreakerPolicy(enabled=False))
    assert seen["states"] == {None} and seen["events"] == []
    # Every message in hand ran out of attempts and went to the DLQ during the outage.
    assert seen["parked"] >= 5
    assert len(seen["delivered"]) + int(seen["dead_lettered"]) == TOTAL


def test_what_the_breaker_hears_of_an_attempt() -> None:
    assert call_outcome(DeliveryResult(503)) == CallOutcome(503)
    assert call_outcome(DeliveryResult(429, retry_after=2.0)) == CallOutcome(429, 2.0)
    timeout = DeliveryResult.failure(ErrorKind.TIMEOUT, "no answer in 100 ms")
    assert call_outcome(timeout) == CallOutcome(error=CallError.TIMEOUT)
    refused = DeliveryResult.failure(ErrorKind.CONNECTION, "connection error: refused")
    assert call_outcome(refused) == CallOutcome(error=CallError.CONNECTION)
    unexpected = DeliveryResult.failure(ErrorKind.UNEXPECTED, "unexpected error: X")
    assert call_outcome(unexpected) == CallOutcome(error=CallError.CONNECTION)
    assert call_outcome(DeliveryResult.invalid("bad secret")) is None  # never sent


def test_the_policy_maps_to_the_governor() -> None:
    sub = subscription(circuit_breaker=BREAKER)
    config = governor_config(sub)
    assert (config.floor_per_s, config.max_per_s) == (PROBE_PER_S, UNLIMITED_PER_S)
    assert config.breaker.window_s == 2 and config.breaker.probe_per_s == PROBE_PER_S
    limited = governor_config(sub.model_copy(update={"rate_limit_per_second": 50.0}))
    assert limited.max_per_s == 50.0


async def test_the_gate_holds_while_open_and_admit_waits_for_a_probe() -> None:
    now = [0.0]

    @dataclass
    class Stats:
        circuit_state: str | None = None
        circuit_rate: float | None = None

    sub = subscription(circuit_breaker=BREAKER)
    changes: list[object] = []
    stats = Stats()
    throttle = Throttle(Governor(governor_config(sub), 0.0), stats, changes.append, lambda: now[0])
    assert stats.circuit_state == "closed"
    for _ in range(5):
        throttle.record(DeliveryResult(500))
    assert stats.circuit_state == "open" and stats.circuit_rate == PROBE_PER_S
    assert [c.to_state for c in changes] == [CircuitState.OPEN]
    gate = asyncio.create_task(throttle.gate())
    await asyncio.sleep(0.6)
    assert not gate.done()  # open: nobody pulls
    now[0] = 0.2  # the first probe is due
    await asyncio.wait_for(throttle.admit(), 1.0)
    second = asyncio.create_task(throttle.admit())
    await asyncio.sleep(0.6)
    assert not second.done()  # the clock stands still: no second probe
    now[0] = 1.5  # the cool-down is over: half-open
    await asyncio.wait_for(asyncio.gather(gate, second), 2.0)
    assert stats.circuit_state == "half_open"


def test_metrics_show_state_and_rate_of_subscriptions_with_a_breaker() -> None:
    class FakeWorker:
        assigned: set[str] = {"p/a", "p/b"}
        runners: dict[str, object] = {}

        def stats(self) -> dict[str, RunnerStats]:
            return {
                "p/a": RunnerStats(circuit_state="open", circuit_rate=0.5),
                "p/b": RunnerStats(),  # breaker disabled
            }

    registry = CollectorRegistry()
    registry.register(WorkerCollector(FakeWorker()))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    assert 'httpbus_circuit_state{state="open",subscription="p/a"} 1.0' in text
    assert 'httpbus_circuit_state{state="closed",subscription="p/a"} 0.0' in text
    assert 'httpbus_circuit_rate_per_second{subscription="p/a"} 0.5' in text
    assert not [line for line in text.splitlines() if "circuit" in line and "p/b" in line]


def test_a_subscription_stored_before_the_checks_still_gets_a_valid_governor() -> None:
    sub = Subscription.model_construct(  # skips validation, as an old stored one would have
        project="p",
        name="s",
        topic_project="p",
        topic="t",
        rate_limit_per_second=0.5,
        circuit_breaker=CircuitBreakerPolicy.model_construct(
            **{**CircuitBreakerPolicy().model_dump(), "floor_per_second": 1.0}
        ),
    )
    config = governor_config(sub)
    assert (config.breaker.probe_per_s, config.floor_per_s, config.max_per_s) == (0.5, 0.5, 0.5)


def test_followers_sidelined_behind_an_endpoint_failure_count_against_the_circuit() -> None:
    """Issue 39: a head dead-lettered on a 500 takes its queue into the DLQ unattempted; the
    queue counts as failed calls. Behind a 400 (the message's fault) or a head never sent,
    it does not."""

    @dataclass
    class Stats:
        circuit_state: str | None = None
        circuit_rate: float | None = None

    sub = subscription(circuit_breaker=CircuitBreakerPolicy(min_calls=20, window_seconds=30))
    for head, opens in (
        (DeliveryResult(400), False),
        (DeliveryResult.invalid("bad secret"), False),
        (DeliveryResult(500), True),
        (DeliveryResult.failure(ErrorKind.TIMEOUT, "no answer"), True),
    ):
        stats = Stats()
        throttle = Throttle(Governor(governor_config(sub), 0.0), stats, clock=lambda: 0.1)
        throttle.record(head)  # the head's own attempt: one call, far below min_calls
        throttle.sidelined(30, head)
        assert (stats.circuit_state == "open") is opens, head
    disabled = Throttle(None, Stats())
    disabled.sidelined(30, DeliveryResult(500))  # no breaker: nothing to count

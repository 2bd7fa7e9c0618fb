"""Retries through the durable delay levels against real ZooKeeper + Kafka and + Pulsar:
backoff schedules kept within 1 s, 400 straight to the DLQ, ``Retry-After`` honoured, and group
order under failure (the A / B / C scenario of the issue)."""

from __future__ import annotations

import time

import pytest

from core.model import RetryPolicy, Subscription
from segments.protocol import Stored
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import (
    BACKENDS,
    Running,
    World,
    control_plane,
    produce,
    real_world,
    subscribe,
)

pytestmark = pytest.mark.parametrize("kind", BACKENDS)
SCHEDULE = RetryPolicy(
    max_attempts=10, backoff="exponential", initial_delay_ms=1_000, multiplier=2.0, jitter=0
)


async def test_first_k_failures_then_delivered_on_schedule(
    kind: str, real_services: RealServices, unique: str
) -> None:
    """Every message fails its first 3 attempts: attempts come 1 s, 2 s, 4 s apart (±1 s)."""
    k, expected = 3, [1.0, 2.0, 4.0]
    async with real_world(kind, real_services, unique) as world:
        world.hook.behaviour = lambda mid, n: (503, {}) if n <= k else (204, {})
        sub = await subscribe(world, retry=SCHEDULE)
        ids = [await produce(world, f"m{i}", f"g{i % 5}") for i in range(20)]
        async with Running(world, sub) as runner:
            await until(lambda: len(world.hook.got) == 20, 60, "every message delivered")
            retried = runner.stats.retried
    assert sorted(world.hook.delivered()) == sorted(ids)
    deviations = []
    for mid in ids:
        tries = world.hook.tries[mid]
        assert len(tries) == k + 1
        gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
        deviations += [gap - want for gap, want in zip(gaps, expected, strict=True)]
    print(
        f"\n[{kind}] {len(ids)} messages x {k} failures: retry gap - schedule "
        f"min {min(deviations) * 1000:.0f} ms, max {max(deviations) * 1000:.0f} ms; "
        f"retried via levels {retried}"
    )
    assert all(-0.05 <= d <= 1.0 for d in deviations), deviations
    assert retried == 20 * k


async def test_400_goes_to_the_dlq_at_once(
    kind: str, real_services: RealServices, unique: str
) -> None:
    async with real_world(kind, real_services, unique) as world:
        world.hook.behaviour = lambda mid, n: (400, {})
        sub = await subscribe(world, retry=SCHEDULE)
        await produce(world, "bad", "g")
        async with Running(world, sub) as runner:
            await until(lambda: runner.stats.dead_lettered == 1, 30, "dead-lettered")
            entries = await _dlq_entries(world, sub, 1)
    (entry,) = entries
    meta = RetryMeta.of(entry.headers)
    assert (meta.attempts, meta.last_status) == (1, 400)
    assert len(world.hook.tries["bad"]) == 1
    assert meta.last_failed_ms is not None
    assert meta.last_failed_ms / 1000 - world.hook.tries["bad"][0] < 1.0


async def _dlq_entries(world: World, sub: Subscription, count: int) -> list[Stored]:
    """The live DLQ entries once there are ``count`` (the hand-off is asynchronous)."""

    async def entries() -> list[Stored]:
        layout = await load_layout(world.meta, sub)
        found = [] if layout is None else (await dlq.scan(world.store, layout)).live()
        return found if len(found) >= count else []

    return await until(entries, 15, f"{count} live DLQ entries", interval=0.1)


async def test_retry_after_is_honoured(kind: str, real_services: RealServices, unique: str) -> None:
    async with real_world(kind, real_services, unique) as world:
        world.hook.behaviour = lambda mid, n: (503, {"Retry-After": "3"}) if n == 1 else (204, {})
        sub = await subscribe(world, retry=SCHEDULE)
        await produce(world, "later", "g")
        async with Running(world, sub):
            await until(lambda: world.hook.delivered() == ["later"], 30, "delivered")
    first, second = world.hook.tries["later"]
    print(f"\n[{kind}] Retry-After: 3 -> retried after {second - first:.2f} s")
    assert 3.0 <= second - first <= 4.0


async def test_group_a_waits_b_goes_on_c_is_dead_lettered_and_unsidelined(
    kind: str, real_services: RealServices, unique: str
) -> None:
    def behaviour(mid: str, n: int) -> tuple[int, dict[str, str]]:
        if mid == "A-0" and n <= 3:
            return 503, {}
        if mid == "C-0" and n == 1:
            return 400, {}
        return 204, {}

    policy = SCHEDULE.model_copy(update={"backoff": "fixed"})
    async with real_world(kind, real_services, unique) as world:
        world.hook.behaviour = behaviour
        sub = await subscribe(world, retry=policy)
        started = time.time()
        a = [await produce(world, f"A-{i}", "A") for i in range(5)]
        b = [await produce(world, f"B-{i}", "B") for i in range(5)]
        c = [await produce(world, f"C-{i}", "C") for i in range(5)]
        async with Running(world, sub) as runner, control_plane(world) as api:
            await until(lambda: len(world.hook.of_group("A")) == 5, 60, "group A")
            assert runner.stats.retried == 3
            page = (await api.get("/s/dlq/messages", params={"order": "oldest"})).json()
            assert [m["message_id"] for m in page["messages"]] == c
            assert world.hook.of_group("C") == []
            answer = await api.post("/s/dlq/messages/unsideline", json={"group_ids": ["C"]})
            assert answer.json() == {"unsidelined": 5, "remaining": 0}
            await until(lambda: len(world.hook.of_group("C")) == 5, 60, "group C replayed")
            after = await produce(world, "C-5", "C")  # the sideline is lifted
            await until(lambda: len(world.hook.of_group("C")) == 6, 30, "C after unsideline")
    assert world.hook.of_group("A") == a
    assert world.hook.of_group("B") == b
    assert world.hook.of_group("C") == [*c, after]
    b_last = world.hook.arrival("B-4")
    a_first = world.hook.arrival("A-0")
    print(
        f"\n[{kind}] B done {b_last - started:.2f} s after produce; A's head delivered "
        f"{a_first - started:.2f} s (3 retries x 1 s)"
    )
    assert b_last < a_first and b_last - started < 3.0

"""The contract every storage backend meets for delivery, written once: order per group, a
retry then success, the DLQ once the attempts are spent, a delayed message, a seek to the
earliest position.

A backend's test module subclasses :class:`DeliveryContract` and provides one fixture,
``world``: a :class:`tests.support.world.World` from that backend's builder
(``embedded_world`` in tests/unit, ``kafka_world`` and ``pulsar_world`` in tests/integration).
The runner, its sender and the endpoint are the same on every backend; only the metastore and
the segment store differ.
"""

from __future__ import annotations

import time

from core.model import RetryPolicy, Subscription
from segments.protocol import Stored
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.until import until
from tests.support.world import Running, World, control_plane, produce, subscribe

# Short delays and two small levels: every retry and delay goes through the durable levels.
QUICK = RetryPolicy(
    max_attempts=3,
    backoff="fixed",
    initial_delay_ms=300,
    max_delay_ms=2_000,
    jitter=0,
    delay_levels_ms=(250, 1_000),
)
WAIT_S = 60  # generous: the real servers are shared by several test runs


async def _dlq_entries(world: World, sub: Subscription, count: int) -> list[Stored]:
    """The live DLQ entries once there are ``count`` (the hand-off is asynchronous)."""

    async def entries() -> list[Stored]:
        layout = await load_layout(world.meta, sub)
        found = [] if layout is None else (await dlq.scan(world.store, layout)).live()
        return found if len(found) >= count else []

    return await until(entries, WAIT_S, f"{count} live DLQ entries", interval=0.1)


class DeliveryContract:
    async def test_each_group_is_delivered_in_produce_order(self, world: World) -> None:
        sub = await subscribe(world, retry=QUICK, max_in_flight=8)
        groups = {g: [f"{g}-{i}" for i in range(5)] for g in ("A", "B", "C")}
        for i in range(5):
            for ids in groups.values():
                await produce(world, ids[i], ids[i].split("-")[0])
        async with Running(world, sub):
            await until(lambda: len(world.hook.got) >= 15, WAIT_S, "15 deliveries")
        for group, ids in groups.items():
            assert world.hook.of_group(group) == ids
        assert sorted(world.hook.delivered()) == sorted(m for ids in groups.values() for m in ids)

    async def test_a_failing_message_is_retried_then_delivered(self, world: World) -> None:
        world.hook.behaviour = lambda mid, n: (503, {}) if n <= 2 else (204, {})
        sub = await subscribe(world, retry=QUICK)
        mid = await produce(world, "flaky-0", "g")
        async with Running(world, sub) as runner:
            await until(lambda: world.hook.delivered() == [mid], WAIT_S, "the third attempt")
            assert runner.stats.retried == 2
        assert len(world.hook.tries[mid]) == 3
        assert world.hook.got[0].attempt == 3  # X-Attempt counts every try
        first, second, third = world.hook.tries[mid]
        assert second - first >= 0.3 and third - second >= 0.3  # the backoff was waited

    async def test_spent_attempts_go_to_the_dlq_and_the_rest_goes_on(self, world: World) -> None:
        world.hook.behaviour = lambda mid, n: (503, {}) if mid == "bad" else (204, {})
        sub = await subscribe(world, retry=QUICK)
        await produce(world, "bad", "g1")
        ok = await produce(world, "ok", "g2")
        async with Running(world, sub) as runner:
            [dead] = await _dlq_entries(world, sub, 1)
            await until(lambda: ok in world.hook.delivered(), WAIT_S, "the healthy group")
            assert runner.stats.dead_lettered == 1
        assert dict(dead.headers)["x-message-id"] == b"bad"
        meta = RetryMeta.of(dead.headers)
        assert meta.attempts == QUICK.max_attempts and meta.last_status == 503
        assert len(world.hook.tries["bad"]) == QUICK.max_attempts
        assert world.hook.delivered() == [ok]

    async def test_a_delayed_message_waits_for_its_time(self, world: World) -> None:
        sub = await subscribe(world, retry=QUICK)
        due = int(time.time() * 1000) + 1_500
        late = await produce(world, "late", "d", **{"x-deliver-at": str(due).encode()})
        now = await produce(world, "now", "e")
        async with Running(world, sub):
            await until(lambda: late in world.hook.delivered(), WAIT_S, "the delayed message")
        assert world.hook.delivered() == [now, late]
        assert world.hook.arrival(late) * 1000 >= due

    async def test_a_seek_to_earliest_delivers_everything_again(self, world: World) -> None:
        sub = await subscribe(world, retry=QUICK)
        groups = {"g0": ["m-0", "m-2"], "g1": ["m-1", "m-3"]}
        for mid in ("m-0", "m-1", "m-2", "m-3"):
            await produce(world, mid, "g0" if mid in groups["g0"] else "g1")
        async with Running(world, sub):
            await until(lambda: len(world.hook.got) == 4, WAIT_S, "the first round")
        async with control_plane(world) as api:
            answer = await api.post(f"/{sub.name}/seek", json={"to": "earliest"})
            assert answer.status_code == 200, answer.text
        async with Running(world, sub):
            await until(lambda: len(world.hook.got) == 8, WAIT_S, "the second round")
        for group, ids in groups.items():
            assert world.hook.of_group(group) == ids + ids

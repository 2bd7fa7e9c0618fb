"""The message trace end to end on real ZooKeeper, Kafka and PostgreSQL: 1 000 messages to
two subscriptions (``mailer`` filters out half of them, ``ledger``'s endpoint refuses one in
ten with a 400, which goes to the DLQ); the producer and the worker write their audit trail
to Kafka, the control plane indexes it into PostgreSQL. The last delivery is traced within
5 s of happening; then every message's trace shows the right outcome and attempt count for
both subscriptions."""

from __future__ import annotations

import asyncio
import time

from core.model import RetryPolicy
from tests.support.delivery import (
    DeliveryWorld,
    audited_world_fixture,  # noqa: F401  (the world fixture)
)
from tests.support.until import until

COUNT = 1_000


def _expected(i: int) -> dict[str, tuple[str, int]]:
    """(state, attempts) per subscription of message i."""
    mailer = ("delivered", 1) if i % 2 == 0 else ("filtered", 0)
    ledger = ("dead_lettered", 1) if i % 10 == 7 else ("delivered", 1)
    return {"shop/mailer": mailer, "shop/ledger": ledger}


async def _setup(world: DeliveryWorld) -> None:
    world.hook.behaviour = lambda mid, n: (400, {}) if mid.endswith("7") else (204, {})
    await world.topic("orders", partitions=4)
    fast = RetryPolicy(max_attempts=2, initial_delay_ms=10, max_delay_ms=50).model_dump()
    await world.subscribe("mailer", "orders", filter='headers["x-kind"] == "order"')
    await world.subscribe("ledger", "orders", retry=fast)
    for name in ("mailer", "ledger"):
        await world.running(name)


async def _publish(world: DeliveryWorld) -> None:
    async def one(i: int) -> None:
        kind = "order" if i % 2 == 0 else "test"
        await world.produce("orders", b"m%d" % i, {"X-Message-Id": f"m{i:04d}", "X-Kind": kind})

    for start in range(0, COUNT, 50):
        await asyncio.gather(*(one(i) for i in range(start, min(start + 50, COUNT))))


async def test_every_message_is_traced_to_its_outcome(world: DeliveryWorld) -> None:
    await _setup(world)
    await _publish(world)
    expected_hits = sum(1 for i in range(COUNT) if i % 2 == 0) + COUNT
    await until(lambda: len(world.hook.requests) >= expected_hits, 60, "every delivery")
    last = max(world.hook.requests, key=lambda r: r.at)
    # The latency: the last request the endpoint answered, until its trace says so.
    i = int(last.id.removeprefix("m"))
    await until(lambda: _traced(world, i), 5, f"{last.id} traced within 5 s")
    took = time.time() - last.at
    # Then every message, once: the right outcome and attempts for both subscriptions.
    wrong = {i: got for i in range(COUNT) if (got := await _trace(world, i)) != _expected(i)}
    print(f"\n{COUNT} messages; the last delivery traced {took:.2f} s after it happened")
    assert wrong == {}


async def _trace(world: DeliveryWorld, i: int) -> dict[str, tuple[str, int]] | None:
    r = await world.cp.get(f"/v1/projects/shop/topics/orders/messages/m{i:04d}")
    if r.status_code != 200:
        return None
    return {s["subscription"]: (s["state"], len(s["attempts"])) for s in r.json()["subscriptions"]}


async def _traced(world: DeliveryWorld, i: int) -> bool:
    return await _trace(world, i) == _expected(i)

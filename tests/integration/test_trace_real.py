"""The message trace end to end on real ZooKeeper, Kafka and PostgreSQL: 1 000 messages to
two subscriptions (``mailer`` filters out half of them, ``ledger``'s endpoint refuses one in
ten with a 400, which goes to the DLQ); the producer and the worker write their audit trail
to Kafka, the control plane indexes it into PostgreSQL, and every message's trace shows the
right outcome and attempt count for both subscriptions within 5 s of the last delivery."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from core.model import RetryPolicy
from tests.support.delivery import DeliveryWorld, delivery_world
from tests.support.services import RealServices
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


async def test_every_message_is_traced_to_its_outcome(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> None:
    async with delivery_world(
        real_services, unique, tmp_path, "kafka-main", database_url=postgres_database
    ) as world:
        await _setup(world)
        await _publish(world)
        expected_hits = sum(1 for i in range(COUNT) if i % 2 == 0) + COUNT
        await until(lambda: len(world.hook.requests) >= expected_hits, 60, "every delivery")
        last = max(r.at for r in world.hook.requests)
        await until(lambda: _all_traced(world), 30, "every message traced (last: a wrong one)")
        took = time.time() - last
    print(f"\n{COUNT} messages traced {took:.1f} s after the last delivery")
    assert took < 5.0 + 2.0  # 5 s, and the last pass over 1 000 traces (its own time)


async def _all_traced(world: DeliveryWorld) -> bool | dict[str, Any]:
    """True once every trace is right; else the first wrong one (falsy: until polls on)."""
    for i in range(COUNT):
        r = await world.cp.get(f"/v1/projects/shop/topics/orders/messages/m{i:04d}")
        if r.status_code != 200:
            return False
        got = {
            s["subscription"]: (s["state"], len(s["attempts"])) for s in r.json()["subscriptions"]
        }
        if got != _expected(i):
            return False
    return True

"""Operational events on real ZooKeeper and Kafka with a real worker (issue 40, item 5): an
endpoint that fails every attempt produces, at the project's notification receiver (a
double), a signed ``subscription.failing`` once the streak has lasted ``failing_after_s``,
``subscription.dead_lettered`` notices whose counts add up to the messages exhausted to the
DLQ (one per ``interval_s`` at most), and one ``subscription.circuit_opened``; when it heals,
``subscription.circuit_closed``. ``subscription.recovered``, which the project does not want,
is not sent."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from core.signing import verify
from tests.support.delivery import (
    DeliveryWorld,
    notifying_world_fixture,  # noqa: F401  (the world fixture)
)
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SUB = "/v1/projects/shop/subscriptions/flaky"
WANTED = [
    "subscription.failing",
    "subscription.dead_lettered",
    "subscription.circuit_opened",
    "subscription.circuit_closed",
]
FAILING_AFTER_S = 10  # the least the setting allows
INTERVAL_S = 10
COUNT = 8


def _notices(world: DeliveryWorld, kind: str | None = None) -> list[dict[str, Any]]:
    found = [json.loads(r.body) for r in world.hook.on("notify")]
    return [n for n in found if kind is None or n["type"] == kind]


async def _dlq_size(world: DeliveryWorld) -> int:
    r = await world.cp.get(f"{SUB}/dlq/messages", params={"limit": 500})
    assert r.status_code == 200, r.text
    return len(r.json()["messages"])


async def test_a_failing_endpoint_is_told_bounded_and_its_recovery_too(
    world: DeliveryWorld,
) -> None:
    settings = {"events": WANTED, "failing_after_s": FAILING_AFTER_S, "interval_s": INTERVAL_S}
    project, secret = await world.notices_to_hook(notifications=settings)
    assert project["notifications"]["events"] == sorted(WANTED)
    await world.topic("orders", partitions=2)
    world.hook.down.add("flaky")
    await world.subscribe(
        "flaky",
        "orders",
        endpoint={"url": world.hook.url_for("flaky")},
        retry={"max_attempts": 2, "initial_delay_ms": 100, "max_delay_ms": 200},
        circuit_breaker={"min_calls": 4, "window_seconds": 10, "cooldown_seconds": 2},
    )
    await world.running("flaky")
    started = time.monotonic()
    for i in range(COUNT):
        await world.produce("orders", b"x", {"X-Message-Id": f"m{i}"})

    await until(lambda: _notices(world, "subscription.circuit_opened"), 60, "circuit opened")
    await until(lambda: _notices(world, "subscription.failing"), 60, "failing told")
    failing_at = time.monotonic()

    async def all_dead() -> bool:
        return await _dlq_size(world) == COUNT

    await until(all_dead, 120, "every message exhausted to the DLQ", interval=0.2)

    def counted() -> int:
        return sum(n["count"] for n in _notices(world, "subscription.dead_lettered"))

    await until(lambda: counted() == COUNT, INTERVAL_S + 15, "the dead-lettered counts")
    exhausted_s = time.monotonic() - started

    world.hook.down.clear()  # healed: the circuit half-opens, and closes on successes
    for i in range(5):
        await world.produce("orders", b"y", {"X-Message-Id": f"n{i}"})
    await until(lambda: _notices(world, "subscription.circuit_closed"), 60, "circuit closed")
    await asyncio.sleep(3)  # proves the unwanted `recovered` (and nothing else) is not sent

    notices = _notices(world)
    for request in world.hook.on("notify"):
        assert verify(secret, dict(request.headers), request.body)
    kinds = [n["type"] for n in notices]
    assert "subscription.recovered" not in kinds  # wanted by nobody here
    assert set(kinds) == set(WANTED), kinds
    [opened] = _notices(world, "subscription.circuit_opened")
    assert opened["openings"] >= 1 and opened["project"] == "shop"
    [failing] = _notices(world, "subscription.failing")
    assert failing["subscription"] == "flaky" and failing["failing_for_s"] >= FAILING_AFTER_S
    assert failing["last_error"].startswith("HTTP 503")
    dead = _notices(world, "subscription.dead_lettered")
    assert 1 <= len(dead) <= 1 + exhausted_s // INTERVAL_S  # bounded: one per interval
    assert all(n["since"] <= n["until"] for n in dead)
    assert len(_notices(world, "subscription.circuit_closed")) == 1
    ids = [n["id"] for n in notices]
    assert len(ids) == len(set(ids))  # each notice has an id of its own (its webhook-id)
    print(
        f"\nfailing told {failing_at - started:.1f} s after the first produce; "
        f"{len(dead)} dead-lettered notices for {COUNT} messages in {exhausted_s:.1f} s"
    )

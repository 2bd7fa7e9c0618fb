"""Auto-disable on real ZooKeeper and Kafka (issue 19, item 4): a subscription whose endpoint
fails every attempt for ``endpoint.disable_after_s`` (3 s here) is disabled by the worker,
its status says so, the project's notification endpoint gets exactly one notice, signed with
the project's notification secret, nothing is delivered while it is disabled, and after
``POST …/enable`` every message produced before and during the outage is delivered."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.support.delivery import (
    DeliveryWorld,
    notifying_world_fixture,  # noqa: F401  (the world fixture)
)
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
WINDOW_S = 3
SUB = "/v1/projects/shop/subscriptions/dead"


async def _produce(world: DeliveryWorld, prefix: str, count: int) -> list[str]:
    ids = [f"{prefix}-{i}" for i in range(count)]
    for mid in ids:
        await world.produce("orders", mid.encode(), {"X-Message-Id": mid})
    return ids


async def _subscription(world: DeliveryWorld) -> dict[str, Any]:
    r = await world.cp.get(SUB)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_dead_endpoint_is_disabled_notified_once_and_enable_delivers_all(
    world: DeliveryWorld,
) -> None:
    _, secret = await world.notices_to_hook()
    await world.topic("orders", partitions=2)
    world.hook.down.add("dead")
    await world.subscribe(
        "dead",
        "orders",
        endpoint={"url": world.hook.url_for("dead"), "disable_after_s": WINDOW_S},
        retry={"max_attempts": 100, "initial_delay_ms": 200, "max_delay_ms": 1_000},
    )
    await world.running("dead")
    before = await _produce(world, "a", 20)

    async def disabled() -> dict[str, Any] | None:
        sub = await _subscription(world)
        return sub if sub["disabled"] else None

    sub = await until(disabled, 60, "the subscription disabled", interval=0.2)
    status = (await world.cp.get(f"{SUB}/status")).json()
    assert status["state"] == "disabled"
    assert status["state_detail"].startswith("disabled (endpoint failing since ")
    assert sub["disabled"]["last_error"].startswith("HTTP 503")
    await until(lambda: "shop/dead" not in world.worker.runners, 30, "the runner stopped")

    await until(lambda: world.hook.on("notify"), 30, "the notice")
    during = await _produce(world, "b", 10)  # the endpoint is back, the subscription is not
    world.hook.down.clear()
    await asyncio.sleep(2)  # proves that nothing more comes: no second notice, no delivery
    [notice] = world.hook.on("notify")
    body = notice.signed_json(secret)
    assert (body["type"], body["project"], body["subscription"]) == (
        "subscription.disabled",
        "shop",
        "dead",
    )
    assert body["failing_since"] and body["disabled_at"]
    assert world.hook.ids("dead") == []

    r = await world.cp.post(f"{SUB}/enable")
    assert r.status_code == 200 and r.json()["disabled"] is None, r.text
    everything = set(before + during)
    await until(lambda: set(world.hook.ids("dead")) == everything, 90, "every message delivered")
    assert (await world.cp.get(f"{SUB}/status")).json()["state"] == "running"
    assert len(world.hook.on("notify")) == 1

"""Topic schemas end to end on real ZooKeeper and Kafka: the control plane stores the
versions, the producer service (a process) validates against the one in force, and the
endpoint sees the version each message was checked against."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.delivery import DeliveryWorld, delivery_world
from tests.support.services import RealServices
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SCHEMA = "/v1/projects/shop/topics/orders/schema"
PRODUCE = "/v1/projects/shop/topics/orders/produce"
V1: dict[str, Any] = {
    "type": "object",
    "properties": {"amount": {"type": "integer", "minimum": 0}},
    "required": ["amount"],
}
V2: dict[str, Any] = {**V1, "properties": {"amount": {"type": "number", "minimum": 0}}}


@pytest.fixture
async def world(
    real_services: RealServices, unique: str, tmp_path: Path
) -> AsyncIterator[DeliveryWorld]:
    async with delivery_world(real_services, unique, tmp_path, "kafka-main") as built:
        yield built


async def test_versions_are_enforced_and_reach_the_endpoint(world: DeliveryWorld) -> None:
    await world.topic("orders", partitions=2)
    r = await world.cp.put(SCHEMA, json={"schema": V1, "compatibility": "backward"})
    assert r.status_code == 200 and r.json()["version"] == 1, r.text
    await world.subscribe("typed", "orders")
    await world.running("typed")

    # The producer process loads the topic with its schema on the first publish.
    ok = await world.producer.post(
        PRODUCE, content=b'{"amount": 3}', headers={"X-Message-Id": "v1"}
    )
    assert ok.status_code == 201, ok.text
    bad = await world.producer.post(PRODUCE, content=b'{"amount": -3}')
    assert bad.status_code == 422
    assert bad.json()["details"] == {"path": "$.amount", "rule": "minimum", "schema_version": 1}
    batch = await world.producer.post(
        PRODUCE + "/batch",
        json={"messages": [{"payload": '{"amount": 4}'}, {"payload": '{"amount": "4"}'}]},
    )
    assert [x["status"] for x in batch.json()["results"]] == [201, 422]

    # A breaking change is refused; a compatible one becomes version 2.
    breaking = await world.cp.put(SCHEMA, json={"schema": {**V1, "additionalProperties": False}})
    assert breaking.status_code == 409 and breaking.json()["code"] == "schema_incompatible"
    r = await world.cp.put(SCHEMA, json={"schema": V2})
    assert r.status_code == 200 and r.json()["version"] == 2, r.text

    async def accepted_under_v2() -> bool:  # 1.5 is refused by version 1, taken by version 2
        r = await world.producer.post(
            PRODUCE, content=b'{"amount": 1.5}', headers={"X-Message-Id": "v2"}
        )
        return r.status_code == 201

    await until(accepted_under_v2, 30, "the producer validates against version 2")
    await until(lambda: {"v1", "v2"} <= set(world.hook.ids("typed")), 30, "both delivered")
    seen = {r.id: r.headers.get("X-Schema-Version") for r in world.hook.on("typed")}
    assert (seen["v1"], seen["v2"]) == ("1", "2")
    assert set(seen.values()) == {"1", "2"}  # every delivered message carries its version

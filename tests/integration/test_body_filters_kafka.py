"""Filters over the JSON body on real ZooKeeper and Kafka: three subscriptions of one topic,
each filtering on the body, get exactly the messages their filter selects; a payload that is
not JSON is filtered by all three (never attempted)."""

from __future__ import annotations

import json

import pytest

from core.model import Endpoint
from segments.protocol import Record
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import Running, kafka_world, record, subscribe

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
FILTERS = {
    "eu-big": 'body.region == "eu" && body.amount > 100',
    "vip": "has(body.customer) && has(body.customer.vip) && body.customer.vip == true",
    "tagged": '"urgent" in body.tags',
}


def order(i: int) -> dict[str, object]:
    found: dict[str, object] = {
        "region": ["eu", "us"][i % 2],
        "amount": i * 7 % 300,
        "tags": ["urgent"] if i % 5 == 0 else [],
    }
    if i % 3 == 0:
        found["customer"] = {"vip": i % 2 == 0}
    return found


def wanted(name: str, body: dict[str, object]) -> bool:
    if name == "eu-big":
        return body["region"] == "eu" and int(body["amount"]) > 100  # type: ignore[call-overload]
    if name == "vip":
        return bool(body.get("customer", {}).get("vip"))  # type: ignore[attr-defined]
    return "urgent" in body["tags"]  # type: ignore[operator]


async def test_three_subscriptions_filter_on_the_body(
    real_services: RealServices, unique: str
) -> None:
    async with kafka_world(real_services, unique, partitions=2, grouped=False) as world:
        subs = [
            await subscribe(
                world, name, filter=expr, endpoint=Endpoint(url=world.hook.url_for(name))
            )
            for name, expr in FILTERS.items()
        ]
        bodies = {f"m{i}": order(i) for i in range(90)}
        for mid, body in bodies.items():
            base = record(mid, None)
            await world.store.produce(
                world.storage, Record(json.dumps(body).encode(), None, base.headers)
            )
        await world.store.produce(world.storage, record("not-json", None))
        async with Running(world, subs[0]) as a, Running(world, subs[1]) as b:
            async with Running(world, subs[2]) as c:
                runners = (a, b, c)
                await until(
                    lambda: all(r.stats.delivered + r.stats.filtered == 91 for r in runners),
                    90,
                    "every message delivered or filtered by all three",
                )
        for name, runner in zip(FILTERS, runners, strict=True):
            expected = sorted(mid for mid, body in bodies.items() if wanted(name, body))
            assert expected and sorted(world.hook.ids(name)) == expected, name
            assert runner.stats.failed_attempts == 0
            assert runner.stats.filter_errors >= 1  # not-json, at least

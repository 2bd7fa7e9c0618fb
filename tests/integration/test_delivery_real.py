"""Delivery end to end on real ZooKeeper with Kafka and with Pulsar: the producer service
(a process) takes messages over HTTP, a worker pushes them to a local endpoint; the control
plane's API pauses, resumes, seeks and reports status."""

from __future__ import annotations

import asyncio
import os
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from core.signing import verify
from tests.support.delivery import DeliveryWorld, delivery_world, jitter
from tests.support.hook import SECRET
from tests.support.load import Producing
from tests.support.services import RealServices
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka, pytest.mark.pulsar]
CLUSTERS = ["kafka-main", "pulsar-main"]


@pytest.fixture(params=CLUSTERS)
async def world(
    request: pytest.FixtureRequest, real_services: RealServices, unique: str, tmp_path: Path
) -> AsyncIterator[DeliveryWorld]:
    async with delivery_world(real_services, unique, tmp_path, request.param) as world:
        yield world


async def test_every_message_arrives_exactly_as_produced(world: DeliveryWorld) -> None:
    await world.topic("orders", partitions=4)
    await world.subscribe("exact", "orders")
    await world.running("exact")
    sent: dict[str, tuple[bytes, str, str]] = {}
    for i in range(120):
        mid = f"m-{i}"
        body = os.urandom(i % 50) + f"payload {i} é".encode()
        kind = ["application/octet-stream", "text/plain; charset=utf-8", "application/json"][i % 3]
        custom = f"v{i}-{'x' * (i % 7)}"
        sent[mid] = (body, kind, custom)
        headers = {"X-Message-Id": mid, "Content-Type": kind, "X-Custom-Trace": custom}
        await world.produce("orders", body, headers)
    await until(lambda: set(world.hook.ids("exact")) == set(sent), what="all 120 delivered")
    for got in world.hook.on("exact"):
        mid = got.headers["X-Message-Id"]
        body, kind, custom = sent[mid]
        assert got.body == body, mid
        assert got.headers["Content-Type"] == kind, mid
        assert got.headers["X-Custom-Trace"] == custom, mid
        assert got.headers["X-Topic"] == "shop/orders"
        assert got.headers["X-Attempt"] == "1"
        produced_at = datetime.fromisoformat(got.headers["X-Produced-At"])
        assert abs(produced_at.timestamp() - got.at) < 60
        assert got.headers["webhook-id"] == mid
        assert verify(SECRET, got.headers, got.body), f"bad signature on {mid}"
    counts = Counter(world.hook.ids("exact"))
    print(f"\n{world.cluster}: 120 messages, {sum(counts.values()) - 120} duplicates")


async def test_group_order_with_50_groups_and_random_endpoint_latency(
    world: DeliveryWorld,
) -> None:
    world.hook.delay = jitter(0.0, 0.02)
    await world.topic("grouped", partitions=4, grouped=True)
    await world.subscribe("ordered", "grouped", max_in_flight=50)
    await world.running("ordered")
    groups, per_group = [f"g{i}" for i in range(50)], 20

    async def one_group(group: str) -> None:
        for seq in range(per_group):
            headers = {"X-Group-Id": group, "X-Message-Id": f"{group}-{seq}"}
            await world.produce("grouped", f"{group}:{seq}".encode(), headers)

    await asyncio.gather(*(one_group(g) for g in groups))
    total = len(groups) * per_group
    await until(lambda: len(set(world.hook.ids("ordered"))) == total, what="every group delivered")
    seen: dict[str, list[int]] = {}
    for got in world.hook.on("ordered"):
        group, seq = got.body.decode().split(":")
        assert got.headers["X-Group-Id"] == group
        seen.setdefault(group, []).append(int(seq))
    for group in groups:
        assert seen[group] == list(range(per_group)), f"{group} out of order: {seen[group]}"
    print(f"\n{world.cluster}: endpoint saw up to {world.hook.max_concurrent} groups at once")
    assert world.hook.max_concurrent > 5  # groups really ran in parallel


async def test_pause_resume_seek_and_status(world: DeliveryWorld) -> None:
    await world.topic("events", partitions=2)
    await world.subscribe("ops", "events")
    await world.running("ops")
    base = "/v1/projects/shop/subscriptions/ops"

    async def one(i: int) -> str:
        await world.produce("events", b"e", {"X-Message-Id": f"a{i}"})
        return f"a{i}"

    load = Producing(one)
    await until(lambda: len(world.hook.on("ops")) >= 30, what="30 deliveries")
    r = await world.cp.post(f"{base}/stop")
    assert r.status_code == 200 and r.json()["paused"] is True
    stopped_at = time.time()
    await asyncio.sleep(2.5)  # proves that nothing more is delivered once stopped
    last = max(g.at for g in world.hook.on("ops"))
    print(f"\n{world.cluster}: last delivery {last - stopped_at:+.3f}s after stop")
    assert last - stopped_at < 1.0
    produced = await load.stop()
    status = (await world.cp.get(f"{base}/status")).json()
    assert status["state"] == "paused"
    delivered = set(world.hook.ids("ops"))
    assert status["lag"] >= len(set(produced) - delivered) > 0
    r = await world.cp.post(f"{base}/start")
    assert r.status_code == 200 and r.json()["paused"] is False
    await until(lambda: set(world.hook.ids("ops")) == set(produced), what="resume, none skipped")

    # Status: figures from the worker, lag from storage.
    # Totals count since this worker took the subscription (docs/operations.md), so only the
    # lag is waited for; it comes from storage and must reach 0 once the backlog is delivered.
    async def settled() -> dict[str, Any] | None:
        status: dict[str, Any] = (await world.cp.get(f"{base}/status")).json()
        # lag comes fresh from storage, the worker's figures up to a second later
        done = status["lag"] == 0 and status["totals"]["delivered"] > 0 and not status["in_flight"]
        return status if done else None

    status = await until(settled, 60, "lag 0 and nothing in flight", interval=0.2)
    assert status["state"] == "running" and status["worker"] == world.worker.member_id
    assert status["segment"] == 1 and len(status["partitions"]) == 2
    assert sum(b["delivered"] for b in status["history"]) == status["totals"]["delivered"]
    assert status["rates"]["delivered_per_s"] > 0  # the resumed backlog, within the last 10 s
    assert status["in_flight"] == 0 and status["updated_at"] is not None
    print(f"{world.cluster}: status {status['totals']} rates {status['rates']}")

    # Seek to a timestamp between two batches: the second is delivered again, the first not.
    first = [f"b{i}" for i in range(20)]
    second = [f"c{i}" for i in range(20)]
    for mid in first:
        await world.produce("events", b"b", {"X-Message-Id": mid})
    await asyncio.sleep(1.5)  # not a wait: the timestamp stands well apart from both batches
    between = datetime.now(UTC)
    await asyncio.sleep(1.5)  # (as above)
    for mid in second:
        await world.produce("events", b"c", {"X-Message-Id": mid})
    await until(lambda: set(first + second) <= set(world.hook.ids("ops")), what="b and c")
    r = await world.cp.post(f"{base}/seek", json={"timestamp": between.isoformat()})
    assert r.status_code == 200, r.text
    assert r.json()["segment"] == 1
    await until(
        lambda: all(Counter(world.hook.ids("ops"))[m] >= 2 for m in second),
        what="second batch again after the seek",
    )
    await asyncio.sleep(1.0)  # proves that the first batch does not come again
    again = Counter(world.hook.ids("ops"))
    assert all(again[m] == 1 for m in first), "messages before the timestamp came again"

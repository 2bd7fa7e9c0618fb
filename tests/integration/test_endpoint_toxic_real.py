"""An endpoint behind 200 ms of latency and a lossy path (issue 34's matrix): 10 % of its
connections reset or stalled, and each cut after a few answers so the loss recurs,
through toxiproxy: a worker process on real ZooKeeper and Kafka delivers one grouped topic
to two subscriptions, ``far`` behind the proxy and ``near`` straight to the endpoint.

``far`` delivers every message, each group's first deliveries in order, by retrying what
the faults cost it; ``near`` is not held back by its neighbour (it finishes long before)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from core.model import Endpoint, RetryPolicy, Subscription
from metastore import paths
from segments.protocol import Record
from tests.support.hook import SECRET, inversions
from tests.support.services import RealServices
from tests.support.toxiproxy import toxiproxy
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
GROUPS = 8
PER_GROUP = 50
LATENCY_MS = 200
# One new connection in twenty is reset, one in twenty stalls (toxics act per connection),
# and every connection is cut after a few answers so that the loss recurs: a lossy path.
RESET, STALL = 0.05, 0.05
CUT_AFTER_BYTES = 600
RETRIES = RetryPolicy(
    max_attempts=30, initial_delay_ms=100, max_delay_ms=1_000, delay_levels_ms=(100, 250, 1_000)
)


def _record(i: int) -> Record:
    group, mid = f"g{i % GROUPS}", f"m{i:04d}"
    headers = (("x-message-id", mid.encode()), ("x-group-id", group.encode()))
    return Record(mid.encode(), key=group.encode(), headers=headers)


async def _subscribe(world: ProcessWorld, name: str, url: str) -> None:
    sub = Subscription(
        project="shop",
        name=name,
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url=url, timeout_ms=1_000),
        signing_secret=SECRET,
        retry=RETRIES,
        max_in_flight=GROUPS,
    )
    await world.catalog.create_subscription(sub)


async def test_an_endpoint_behind_latency_and_loss_gets_everything_in_order_alone(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with (
        process_world(real_services, unique, tmp_path, grouped=True) as world,
        toxiproxy() as tox,
    ):
        hook = world.hook.url.removeprefix("http://").split("/", 1)[0]
        proxy = await tox.proxy(f"endpoint-{unique}", upstream=hook)
        await proxy.toxic("latency", latency=LATENCY_MS, jitter=LATENCY_MS // 4)
        await proxy.toxic("reset_peer", toxicity=RESET, timeout=0)
        await proxy.toxic("timeout", toxicity=STALL, stream="upstream", timeout=0)
        await proxy.toxic("limit_data", bytes=CUT_AFTER_BYTES)
        await _subscribe(world, "far", f"http://{proxy.listen}/hook/far")
        await _subscribe(world, "near", world.hook.url_for("near"))
        member = f"wt-{unique}"
        assigned = json.dumps(["shop/far", "shop/near"]).encode()
        await world.meta.create(paths.assignment(member), assigned)
        [worker] = world.workers([member])
        await worker.ready()
        await world.all_held(["far", "near"])
        started = time.time()
        await world.produce_many([_record(i) for i in range(GROUPS * PER_GROUP)])
        expected = {f"m{i:04d}" for i in range(GROUPS * PER_GROUP)}
        await until(lambda: expected <= set(world.hook.ids("near")), 60, "near: everything")
        near_done = time.time() - started
        await until(lambda: expected <= set(world.hook.ids("far")), 180, "far: everything")
        far_done = time.time() - started
        status = await world.meta.get(paths.subscription_status("shop", "far"))
    far = world.hook.on("far")
    totals = json.loads(status.data)["totals"] if status else {}
    print(
        f"\nfar (+{LATENCY_MS} ms, {RESET:.0%} reset, {STALL:.0%} stalled connections, cut "
        f"after {CUT_AFTER_BYTES} bytes): "
        f"{len(expected)} messages in {far_done:.1f}s, {len(far)} deliveries, worker totals "
        f"{totals}; near: {near_done:.1f}s"
    )
    assert not inversions(far), inversions(far)
    assert not inversions(world.hook.on("near")), "near reordered"
    assert near_done < far_done / 2, "the slow endpoint held its neighbour back"

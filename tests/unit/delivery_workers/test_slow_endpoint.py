"""A slow endpoint cannot hold the worker: with ``endpoint.timeout_ms`` at its 15-minute
maximum, an endpoint that holds every request keeps at most the worker's per-subscription
in-flight cap of the sender's connections, and another subscription on the same worker and
the same topic keeps delivering through the rest of the pool."""

from __future__ import annotations

from pathlib import Path

from core.model import MAX_TIMEOUT_MS, Endpoint
from delivery_workers.http_sender import HttpSender
from delivery_workers.worker import Worker
from metastore.embedded import EmbeddedMetaStore
from tests.support.until import until
from tests.support.workers import workers_world
from tests.support.world import subscription

POOL = 4


async def test_an_endpoint_holding_requests_for_minutes_leaves_the_others_delivering(
    tmp_path: Path,
) -> None:
    async with workers_world(tmp_path) as world:
        world.hook.held.add("slow")  # answers only when the test ends
        slow = Endpoint(url=world.hook.url_for("slow"), timeout_ms=MAX_TIMEOUT_MS)
        # Its own limit (100) is above the pool: the worker's cap is what bounds it.
        await world.catalog.create_subscription(subscription("slow", endpoint=slow))
        await world.subscribe("fast")
        meta = EmbeddedMetaStore(world.file)
        await meta.start()
        sender = HttpSender(max_connections=POOL)
        await sender.start()
        worker = Worker(
            meta,
            world.world.stores,
            sender,
            "w1",
            commit_every_s=0.1,
            lock_retry_s=0.1,
            max_in_flight_per_subscription=POOL // 2,
        )
        await worker.start()
        world.stack.append((worker, meta, sender))

        first = await world.produce("a", 10)
        await until(lambda: set(world.hook.ids("fast")) == set(first), what="fast delivers")
        runner = worker.runners["p/slow"]
        await until(lambda: runner.stats.in_flight == POOL // 2, what="slow holds its cap")
        more = await world.produce("b", 30)
        await until(
            lambda: set(world.hook.ids("fast")) == set(first + more), what="fast keeps delivering"
        )
        assert runner.stats.in_flight == POOL // 2  # still held, never more
        assert sender.pool.open_connections <= POOL
        assert world.hook.ids("slow") == []  # nothing answered, nothing timed out
        assert runner.stats.failed_attempts == 0

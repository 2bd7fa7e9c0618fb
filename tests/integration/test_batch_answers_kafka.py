"""Batches with per-message answers on real ZooKeeper and Kafka (issue 21): 10 000 messages
reach a local endpoint in batches of up to 100, each delivered once; the one message the
endpoint names failed in its answers (``{"failed": [id]}`` with a 200) is retried alone and
ends in the DLQ, and no other message is sent again. Then the same 10 000 one per request,
for the messages/s of both."""

from __future__ import annotations

import json
import time
from collections import Counter

import pytest

from core.model import BatchPolicy, Endpoint, RetryPolicy
from segments.protocol import Record
from segments.subscription import dlq
from tests.support.machine import load_average
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import World, kafka_world, layout_of, quick_running, record, subscribe

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
COUNT, BATCH, BAD = 10_000, 100, "m-04242"
RETRY = RetryPolicy(
    max_attempts=3, backoff="fixed", initial_delay_ms=200, jitter=0, delay_levels_ms=(100,)
)


def _answer(path: str, body: bytes) -> bytes:
    if path != "batched":
        return b""
    named = [m["id"] for m in json.loads(body) if m["id"] == BAD]
    return json.dumps({"failed": named}).encode()


async def _produce(world: World) -> list[str]:
    ids = [f"m-{i:05d}" for i in range(COUNT)]
    for start in range(0, COUNT, 1_000):
        records: list[Record] = [record(mid, None) for mid in ids[start : start + 1_000]]
        for outcome in await world.store.produce_many(world.storage, records):
            assert not isinstance(outcome, Exception), outcome
    return ids


async def test_10_000_in_batches_of_100_once_each_and_the_one_named_failed_alone_to_the_dlq(
    real_services: RealServices, unique: str
) -> None:
    async with kafka_world(real_services, unique, partitions=4, grouped=False) as world:
        world.hook.behaviour = lambda mid, n: (200, {})  # a 204 has no body
        world.hook.answer = _answer
        ids = await _produce(world)
        batched = await subscribe(
            world,
            "batched",
            batch=BatchPolicy(max_messages=BATCH, max_bytes=1_000_000, max_wait_ms=100),
            retry=RETRY,
            max_in_flight=1_000,
            endpoint=Endpoint(url=world.hook.url_for("batched")),
        )
        async with quick_running(world, batched) as runner:
            t0 = time.monotonic()
            await until(lambda: runner.stats.delivered >= COUNT - 1, 300, "9 999 delivered")
            batch_s = time.monotonic() - t0
            await until(lambda: runner.stats.dead_lettered == 1, 60, f"{BAD} dead-lettered")
            failed_attempts = runner.stats.failed_attempts
        requests = [json.loads(r.body) for r in world.hook.on("batched")]
        layout = await layout_of(world, batched)

        async def dead_letters() -> list[str]:
            view = await dlq.scan(world.store, layout)
            return [dict(e.headers)["x-message-id"].decode() for e in view.live()]

        assert await until(dead_letters, 30, f"{BAD} in the DLQ") == [BAD]

        single = await subscribe(
            world,
            "single",
            max_in_flight=1_000,
            endpoint=Endpoint(url=world.hook.url_for("single")),
        )
        async with quick_running(world, single) as runner:
            t0 = time.monotonic()
            await until(lambda: runner.stats.delivered >= COUNT, 300, "10 000 delivered singly")
            single_s = time.monotonic() - t0

    taken = Counter(m["id"] for batch in requests for m in batch if m["id"] != BAD)
    assert taken == Counter(mid for mid in ids if mid != BAD)  # the rest once each
    assert all(1 <= len(batch) <= BATCH for batch in requests)
    with_bad = [batch for batch in requests if any(m["id"] == BAD for m in batch)]
    assert [m["attempt"] for batch in with_bad for m in batch if m["id"] == BAD] == [1, 2, 3]
    assert [len(batch) for batch in with_bad[1:]] == [1, 1]  # retried alone
    assert failed_attempts == 3  # its three attempts; no other message failed
    sizes = Counter(len(batch) for batch in requests)
    print(
        f"\nbatches of up to {BATCH}: {COUNT - 1} delivered in {batch_s:.2f} s = "
        f"{(COUNT - 1) / batch_s:,.0f} msgs/s in {len(requests)} requests "
        f"(sizes: {len(sizes)} distinct, {sizes.get(BATCH, 0)} full); {BAD} attempts "
        f"{[len(b) for b in with_bad]} messages per request, then the DLQ\n"
        f"one per request: {COUNT} delivered in {single_s:.2f} s = {COUNT / single_s:,.0f} "
        f"msgs/s; batch / single = {single_s / batch_s * (COUNT - 1) / COUNT:.1f}x; "
        f"load average {load_average()}"
    )

"""Delivery in batches on real ZooKeeper and Kafka: 500 messages of 60 groups reach a local
endpoint in signed batches of up to 50, each exactly once, every group in order."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from core.model import BatchPolicy
from tests.support.hook import SECRET
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import Running, kafka_world, produce, subscribe

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
COUNT, GROUPS, BATCH = 500, 60, 50


async def test_500_messages_in_batches_of_up_to_50_once_each_in_group_order(
    real_services: RealServices, unique: str
) -> None:
    async with kafka_world(real_services, unique, partitions=4) as world:
        world.hook.secret = SECRET
        policy = BatchPolicy(max_messages=BATCH, max_bytes=1_000_000, max_wait_ms=100)
        sub = await subscribe(world, batch=policy)
        sent = []
        for i in range(COUNT):
            group = f"g{i % GROUPS}"
            sent.append(await produce(world, f"{group}-{i // GROUPS}", group))
        async with Running(world, sub) as runner:
            await until(lambda: runner.stats.delivered >= COUNT, 120, "500 delivered")
        batches = [json.loads(r.body) for r in world.hook.on("")]
    ids = [str(m["id"]) for batch in batches for m in batch]
    assert Counter(ids) == Counter(sent)  # each exactly once
    assert all(1 <= len(batch) <= BATCH for batch in batches)
    assert max(len(batch) for batch in batches) > 1
    assert world.hook.bad_signatures == 0
    for g in range(GROUPS):
        seen = [mid for mid in ids if mid.startswith(f"g{g}-")]
        assert seen == [mid for mid in sent if mid.startswith(f"g{g}-")], f"group g{g}"
    sizes = Counter(len(batch) for batch in batches)
    print(f"\n{len(batches)} requests for {COUNT} messages; sizes {sorted(sizes.items())}")

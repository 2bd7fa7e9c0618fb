"""An idle runner at the end of its open segment waits for news or a change of its topic
instead of a read and a look at the topic each second (issue 35: 2 000 idle subscriptions
on one worker); a seal still moves it on, and new messages still reach it at once."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import Any

from delivery_workers.items import Source
from delivery_workers.shared_reads import SharedSegmentReader, TopicCache
from tests.support.until import until
from tests.support.world import EndpointWorld as World
from tests.support.world import (
    endpoint_world_fixture,  # noqa: F401  (the world fixture)
    produce_groups,
    start_runner,
    stop_runner,
    subscribe,
    switch_to_second_segment,
)

WINDOW_S = 3.0  # the old intake looked at its topic three times a partition in this


@dataclass
class _Looks:
    count: int = 0


def _count_looks(cache: TopicCache) -> _Looks:
    looks, real = _Looks(), cache.get_topic

    async def counted(*args: Any) -> Any:
        looks.count += 1
        return await real(*args)

    cache.get_topic = counted  # type: ignore[method-assign]
    return looks


def _waiting_everywhere(source: Source | None, partitions: int) -> bool:
    if source is None:
        return False
    waits = source._found_nothing.values()
    return len(waits) == partitions and all(at == math.inf for _, at in waits)


async def test_an_idle_runner_waits_for_news_and_a_seal_moves_it_on(world: World) -> None:
    endpoint = world.endpoint
    assert endpoint is not None
    reader = SharedSegmentReader(world.catalog, world.stores)
    assert isinstance(reader.catalog, TopicCache)
    sub = await subscribe(world)
    await produce_groups(world.store, "st.1", 2, 3)
    runner, task, sender = await start_runner(world, sub, reader=reader)
    try:
        await until(lambda: len(endpoint.received) == 6, 10, "the first six")
        source = await until(lambda: runner.walk.intake and runner.walk.intake.source, 10)
        await until(lambda: _waiting_everywhere(source, 3), 15, "every partition to idle")
        assert source.caught_up()  # a lag sample asks the storage nothing meanwhile
        looks = _count_looks(reader.catalog)
        await asyncio.sleep(WINDOW_S)  # a window in which nothing may happen
        assert looks.count <= 1, f"{looks.count} looks at the topic in {WINDOW_S} s idle"
        await produce_groups(world.store, "st.1", 1, 1, first_seq=3)  # news: at once
        await until(lambda: len(endpoint.received) == 7, 5, "the news")
        await until(lambda: _waiting_everywhere(source, 3), 15, "idle again")
        await switch_to_second_segment(world, world.store)  # a change of the topic
        await produce_groups(world.store, "st.2", 2, 3, first_seq=4)
        await until(lambda: len(endpoint.received) == 13, 10, "the second segment's six")
    finally:
        await stop_runner(task, sender)
        await reader.aclose()

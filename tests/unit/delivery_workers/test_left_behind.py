"""A segment a failover left behind (``available`` mode) is read to its end once sealed, even
when a read of it comes back empty short of the end (a slow fetch): the walk asks again
whether its commits reached every end instead of taking the intake's end for it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from core.model import Failover, FailoverMode, SegmentState
from segments.protocol import SegmentStore, Stored
from segments.reader import SegmentReader
from tests.support.until import until
from tests.support.world import (
    HOUR_MS,
    endpoint_world_fixture,  # noqa: F401  (the world fixture)
    produce_groups,
    runner_segment,
    start_runner,
    stop_runner,
    subscribe,
)
from tests.support.world import EndpointWorld as World


class SlowFetch:
    """The store, but a read of ``st.1`` partition 1 (six of the nine messages) gives one
    message at most, and the first ``misses`` reads past its first message come back empty
    after their timeout, as a fetch that did not arrive in time."""

    def __init__(self, inner: SegmentStore, misses: int) -> None:
        self.inner, self.misses = inner, misses

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, name: str, partition: int, start: int, **kw: Any) -> list[Stored]:
        if name != "st.1" or partition != 1:
            return await self.inner.read(name, partition, start, **kw)
        if start > 0 and self.misses > 0:
            self.misses -= 1
            await asyncio.sleep(kw.get("timeout", 1.0))
            return []
        return (await self.inner.read(name, partition, start, **kw))[:1]


async def _fail_over_available(world: World) -> None:
    """Segment 1 left unsealed, segment 2 written, in ``available`` mode."""
    topic = await world.catalog.get_topic("p", "t")
    failover = Failover(clusters=("standby",), mode=FailoverMode.AVAILABLE)
    await world.catalog.update_topic(topic.model_copy(update={"failover": failover}))
    await world.store.create_topic("st.2", 3, retention_ms=HOUR_MS)
    await world.catalog.add_segment("p", "t", runner_segment(2, SegmentState.PENDING))
    left = runner_segment(1, SegmentState.UNSEALED).model_copy(
        update={"unsealed_at": datetime.now(UTC)}
    )
    topic = await world.catalog.get_topic("p", "t")
    await world.catalog.commit_segment_switch(topic, left, runner_segment(2, SegmentState.ACTIVE))


async def _seal_first(world: World) -> None:
    seg = (await world.catalog.get_topic("p", "t")).segment(1)
    assert seg is not None
    ends = await world.store.seal("st.1")
    sealed = seg.model_copy(
        update={"state": SegmentState.SEALED, "end_positions": ends, "sealed_at": datetime.now(UTC)}
    )
    await world.catalog.update_segment("p", "t", sealed)


async def test_a_left_behind_segment_read_short_is_read_again_to_its_end(world: World) -> None:
    endpoint = world.endpoint
    assert endpoint is not None
    sub = await subscribe(world)
    first = await produce_groups(world.store, "st.1", 3, 3)  # 9 messages over 3 partitions
    await _fail_over_available(world)
    second = await produce_groups(world.store, "st.2", 3, 1, first_seq=3)
    slow = SlowFetch(world.store, misses=2)  # the main read, then the end probe
    reader = SegmentReader(world.catalog, {"embedded": slow})  # type: ignore[dict-item]
    runner, task, sender = await start_runner(world, sub, reader=reader)
    try:
        await until(lambda: {mid for _, mid, _ in endpoint.received} >= set(second), 10)
        await _seal_first(world)
        await until(lambda: {mid for _, mid, _ in endpoint.received} >= set(first), 15)
        assert slow.misses == 0  # the short read did happen
    finally:
        await stop_runner(task, sender)

"""The writer follows the produce pointer; the reader advances a subscription to the next
segment only when the old one is sealed and fully committed (embedded backends)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pytest

from core.errors import SegmentFenced, VersionConflict
from core.model import (
    SegmentState,
    Topic,
)
from metastore.catalog import Catalog
from segments.protocol import Record, SegmentStore
from segments.reader import SegmentReader, commit_group
from segments.writer import SegmentWriter
from tests.support.world import HOUR_MS, embedded_world, segment, subscription


@dataclass
class World:
    catalog: Catalog
    store: SegmentStore
    writer: SegmentWriter
    reader: SegmentReader


_segment = partial(segment, "embedded")


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with embedded_world(tmp_path, grouped=False) as built:
        await built.catalog.create_subscription(subscription(url="http://127.0.0.1:9/x"))
        writer = SegmentWriter(built.stores, built.catalog.get_topic)
        yield World(built.catalog, built.store, writer, built.reader)


async def _switch(world: World, *, final: bool = True) -> Topic:
    """Seal segment 1 and move the produce pointer to a new segment 2 (with the old one's
    ends still to settle unless ``final``)."""
    await world.store.create_topic("st.2", 2, retention_ms=HOUR_MS)
    await world.catalog.add_segment("p", "t", _segment(2, SegmentState.PENDING))
    topic = await world.catalog.get_topic("p", "t")
    ends = await world.store.seal("st.1")
    sealed = _segment(1, SegmentState.SEALED).model_copy(
        update={"end_positions": ends, "sealed_at": datetime.now(UTC), "ends_final": final}
    )
    return await world.catalog.commit_segment_switch(
        topic, sealed, _segment(2, SegmentState.ACTIVE)
    )


async def test_writer_follows_the_pointer_after_the_fence(world: World) -> None:
    stale = await world.catalog.get_topic("p", "t")
    first = await world.writer.write(stale, Record(b"a", key=b"g"))
    assert first.segment_id == 1
    await _switch(world)
    # A producer still holding the old topic hits the fence, refreshes, lands on segment 2.
    second = await world.writer.write(stale, Record(b"b", key=b"g"))
    assert second.segment_id == 2
    assert [m.value for m in await world.store.read("st.2", second.partition, 0)] == [b"b"]


async def test_writer_refusal_stands_when_the_pointer_did_not_move(world: World) -> None:
    topic = await world.catalog.get_topic("p", "t")
    await world.store.seal("st.1")
    with pytest.raises(SegmentFenced):
        await world.writer.write(topic, Record(b"x"))


async def test_switch_is_compare_and_set(world: World) -> None:
    stale = await world.catalog.get_topic("p", "t")
    await _switch(world)
    with pytest.raises(VersionConflict):
        await world.catalog.commit_segment_switch(
            stale, _segment(1, SegmentState.SEALED), _segment(2, SegmentState.ACTIVE)
        )


async def test_reader_advances_only_when_sealed_and_fully_committed(world: World) -> None:
    topic = await world.catalog.get_topic("p", "t")
    written = [
        await world.writer.write(topic, Record(f"{i}".encode(), key=f"g{i}".encode()))
        for i in range(6)
    ]
    sub = await world.catalog.get_subscription("p", "s")
    assert await world.reader.try_advance(sub) is None  # segment 1 is still active
    await _switch(world)
    _, segment = await world.reader.consume_segment(sub)
    assert segment.state is SegmentState.SEALED and segment.end_positions is not None
    # Commit all but the last message of one partition: must not advance.
    last = written[-1]
    partial = dict(segment.end_positions)
    partial[last.partition] = last.position
    await world.reader.commit(sub, segment, partial)
    assert await world.reader.try_advance(sub) is None
    await world.reader.commit(sub, segment, dict(segment.end_positions))
    advanced = await world.reader.try_advance(sub)
    assert advanced is not None and advanced.consume_pointer is not None
    assert advanced.consume_pointer.segment_id == 2
    # The stale view of the subscription loses the compare-and-set.
    with pytest.raises(VersionConflict):
        await world.catalog.move_consume_pointer(sub, 2)
    assert commit_group(sub) == "httpbus.p.s"


async def test_reader_resumes_from_committed_positions(world: World) -> None:
    topic = await world.catalog.get_topic("p", "t")
    done = [await world.writer.write(topic, Record(f"{i}".encode(), key=b"same")) for i in range(5)]
    sub = await world.catalog.get_subscription("p", "s")
    _, segment = await world.reader.consume_segment(sub)
    part = done[0].partition
    await world.reader.commit(sub, segment, {part: done[2].position})
    start = (await world.reader.start_positions(sub, segment))[part]
    back = await world.reader.read(sub, segment, part, start, timeout=1)
    assert [m.value for m in back] == [b"2", b"3", b"4"]


async def test_reader_waits_for_the_final_ends_of_a_segment_that_settles(world: World) -> None:
    """A Kafka cutover moves the pointer on the fence with provisional ends: nobody passes the
    old segment until the final ones are recorded, even with every position committed."""
    topic = await world.catalog.get_topic("p", "t")
    await world.writer.write(topic, Record(b"0", key=b"g"))
    sub = await world.catalog.get_subscription("p", "s")
    await _switch(world, final=False)
    _, segment = await world.reader.consume_segment(sub)
    assert segment.end_positions is not None and not segment.finished
    await world.reader.commit(sub, segment, dict(segment.end_positions))
    assert await world.reader.try_advance(sub) is None
    settled = segment.model_copy(update={"ends_final": True})
    await world.catalog.update_segment("p", "t", settled)
    advanced = await world.reader.try_advance(sub)
    assert advanced is not None and advanced.consume_pointer is not None
    assert advanced.consume_pointer.segment_id == 2


async def test_reader_begins_a_segment_at_its_start_positions(world: World) -> None:
    """A verified migration's switch or rollback sets where readers begin a segment: with
    nothing committed they start there, a commit past it wins, and the segment barrier counts
    a partition as read from its start on (one that starts at its end is drained)."""
    topic = await world.catalog.get_topic("p", "t")
    done = [await world.writer.write(topic, Record(f"{i}".encode(), key=b"same")) for i in range(5)]
    part = done[0].partition
    sub = await world.catalog.get_subscription("p", "s")
    _, plain = await world.reader.consume_segment(sub)
    segment = plain.model_copy(update={"start_positions": {part: done[3].position}})
    assert (await world.reader.start_positions(sub, segment))[part] == done[3].position
    back = await world.reader.read(sub, segment, part, done[3].position, timeout=1)
    assert [m.value for m in back] == [b"3", b"4"]
    end = done[4].position + 1
    sealed = segment.model_copy(
        update={"state": SegmentState.SEALED, "end_positions": {part: end}, "ends_final": True}
    )
    assert not await world.reader.drained(sub, sealed)  # 3 and 4 are still to read
    at_end = sealed.model_copy(update={"start_positions": {part: end}})
    assert await world.reader.drained(sub, at_end)
    await world.reader.commit(sub, segment, {part: end})
    assert (await world.reader.start_positions(sub, segment))[part] == end
    assert await world.reader.drained(sub, sealed)

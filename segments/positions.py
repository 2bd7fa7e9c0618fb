"""Where on a topic's timeline a subscription reads from: ``earliest``, ``latest`` or the
first message at a time, as a segment and a position per partition.

One answer for the two callers that ask: a subscription's start at create
(:class:`core.model.StartPoint`) and a seek (``control_plane.services.operations``).

- ``earliest``: the oldest readable segment, from its first retained message;
- ``latest``: the active segment at its end positions;
- a time: the oldest readable segment holding a message stored at or after it (sealed
  segments closed long before it are skipped without a lookup), else the last readable one at
  its end. Each backend answers with its own offset-for-time: Kafka offsets-for-times, a
  Pulsar lookup by publish time, an index seek on embedded (``SegmentStore.position_at``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime

from core.errors import NotFound
from core.model import Segment, SegmentState, Topic

from .protocol import SegmentStore, store_of

SEAL_SKEW_MS = 60_000  # producer clocks may run behind the seal by this much


def readable(topic: Topic) -> list[Segment]:
    """The segments a subscription may read, oldest first; ``NotFound`` if none."""
    found = [
        s for s in topic.segments if s.state not in (SegmentState.PENDING, SegmentState.RETIRED)
    ]
    if not found:
        raise NotFound(f"topic {topic.project}/{topic.name} has no readable segment")
    return found


async def earliest(store: SegmentStore, segment: Segment) -> dict[int, int]:
    """Per partition, the first retained position of ``segment``."""
    found = await asyncio.gather(
        *(store.position_at(segment.storage_topic, p, 0) for p in range(segment.partitions))
    )
    return dict(enumerate(found))


async def locate(
    topic: Topic, stores: Mapping[str, SegmentStore], at: str | datetime
) -> tuple[Segment, dict[int, int]]:
    """The segment and positions of ``at``: ``"earliest"``, ``"latest"`` or a time."""
    segments = readable(topic)
    if at == "earliest":
        first = segments[0]
        return first, await earliest(store_of(stores, first.cluster), first)
    if not isinstance(at, datetime):
        active = topic.active_segment or segments[-1]
        store = store_of(stores, active.cluster)
        return active, await store.end_positions(active.storage_topic)
    return await _at_time(segments, stores, int(at.timestamp() * 1000))


async def _at_time(
    segments: list[Segment], stores: Mapping[str, SegmentStore], at_ms: int
) -> tuple[Segment, dict[int, int]]:
    for segment in segments:
        sealed_ms = _ms(segment.sealed_at)
        last = segment is segments[-1]
        if not last and sealed_ms is not None and sealed_ms < at_ms - SEAL_SKEW_MS:
            continue  # closed long before the time: nothing of it is due
        store = store_of(stores, segment.cluster)
        found = await asyncio.gather(
            *(store.position_at(segment.storage_topic, p, at_ms) for p in range(segment.partitions))
        )
        positions = dict(enumerate(found))
        ends = segment.end_positions or await store.end_positions(segment.storage_topic)
        if last or any(pos < ends.get(p, 0) for p, pos in positions.items()):
            return segment, positions
    raise AssertionError("unreachable: the last readable segment always answers")


def _ms(at: datetime | None) -> int | None:
    return None if at is None else int(at.timestamp() * 1000)

"""Retiring segments: storage no subscription needs any more, past the topic's retention.

A sealed segment is retired when every subscription of its topic has moved its consume
pointer past it and it was sealed more than ``retention_hours`` ago: its record becomes
RETIRED (the timeline keeps it) and its storage topic is deleted. The record changes first,
by compare-and-set, so a reader never finds a SEALED segment without storage; a storage topic
whose deletion failed is deleted again on the next round (a RETIRED record whose storage
still exists is retried). The process elected to the role ``retirement`` runs
:func:`retire_segments` when it takes the lead and every ``interval_s`` after
(:class:`SegmentRetirement`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

from control_plane.leaders.context import ContextRole, LeaderContext
from control_plane.leaders.election import every
from core.errors import HttpbusError, NotFound
from core.model import Segment, SegmentState, Topic, utcnow
from metastore.catalog import Catalog
from segments.protocol import SegmentStore

log = logging.getLogger(__name__)
ROLE = "retirement"


class SegmentRetirement(ContextRole):
    """Retire segments every ``interval_s`` while this process leads the role."""

    def __init__(
        self,
        context: LeaderContext,
        *,
        interval_s: float = 300.0,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        super().__init__(context, ROLE)
        self.interval_s = interval_s
        self.now = now

    async def lead(self, lost: asyncio.Event) -> None:
        await every(lost, self.interval_s, self.retire, "retiring segments")

    async def retire(self) -> None:
        await retire_segments(self.catalog, self.stores, self.now())


async def retirable(catalog: Catalog, topic: Topic, now: datetime) -> list[Segment]:
    """The sealed segments of ``topic`` that no subscription needs and retention let go.
    The subscriptions' pointers are read only when a segment is old enough: most topics
    have none, and a round over 10^4 topics would read 10^5 subscriptions otherwise."""
    keep_after = now - timedelta(hours=topic.retention_hours)
    candidates = [
        s
        for s in topic.segments
        if s.state is SegmentState.SEALED
        and s.finished  # its final ends recorded
        and s.sealed_at is not None
        and s.sealed_at <= keep_after
    ]
    if not candidates:
        return []
    pointers = []
    for project, name in await catalog.subscribers(topic.project, topic.name):
        sub = await catalog.get_subscription(project, name)
        if sub.consume_pointer is not None:
            pointers.append(sub.consume_pointer.segment_id)
    oldest_needed = min(pointers, default=None)
    return [s for s in candidates if oldest_needed is None or s.id < oldest_needed]


async def retire_segments(
    catalog: Catalog, stores: Mapping[str, SegmentStore], now: datetime
) -> list[tuple[str, str, int]]:
    """Retire what can be retired in every topic; ``(project, topic, segment)`` retired."""
    done = []
    for project in await catalog.list_projects():
        for name in await catalog.list_topics(project):
            try:
                topic = await catalog.get_topic(project, name)
                for segment in await retirable(catalog, topic, now):
                    await _retire(catalog, stores, topic, segment)
                    done.append((project, name, segment.id))
            except HttpbusError as exc:  # one topic's trouble does not stop the others
                log.warning("retiring segments of %s/%s: %s", project, name, exc)
    return done


async def _retire(
    catalog: Catalog, stores: Mapping[str, SegmentStore], topic: Topic, segment: Segment
) -> None:
    retired = segment.model_copy(update={"state": SegmentState.RETIRED})
    await catalog.update_segment(topic.project, topic.name, retired)
    store = stores.get(segment.cluster)
    if store is None:
        log.warning(
            "segment %s retired; cluster %s not configured here", segment.id, segment.cluster
        )
        return
    try:
        await store.delete_topic(segment.storage_topic)
    except NotFound:
        pass
    log.info("retired segment %s of %s/%s", segment.id, topic.project, topic.name)

"""Retiring segments: storage no subscription needs any more, past the topic's retention.

A sealed segment is retired when every subscription of its topic has moved its consume
pointer past it and it was sealed more than ``retention_hours`` ago: its record becomes
RETIRED (the timeline keeps it) and its storage topic is deleted. The record changes first,
by compare-and-set, so a reader never finds a SEALED segment without storage; a storage topic
whose deletion failed is deleted again on the next round (a RETIRED record whose storage
still exists is retried). The cutover leader runs :func:`retire_segments` periodically.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta

from core.errors import HttpbusError, NotFound
from core.model import Segment, SegmentState, Topic
from metastore.catalog import Catalog
from segments.protocol import SegmentStore

log = logging.getLogger(__name__)


async def retirable(catalog: Catalog, topic: Topic, now: datetime) -> list[Segment]:
    """The sealed segments of ``topic`` that no subscription needs and retention let go."""
    pointers = []
    for project, name in await catalog.subscribers(topic.project, topic.name):
        sub = await catalog.get_subscription(project, name)
        if sub.consume_pointer is not None:
            pointers.append(sub.consume_pointer.segment_id)
    oldest_needed = min(pointers, default=None)
    keep_after = now - timedelta(hours=topic.retention_hours)
    return [
        s
        for s in topic.segments
        if s.state is SegmentState.SEALED
        and s.finished  # its final ends recorded
        and s.sealed_at is not None
        and s.sealed_at <= keep_after
        and (oldest_needed is None or s.id < oldest_needed)
    ]


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

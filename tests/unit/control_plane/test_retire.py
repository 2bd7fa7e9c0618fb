"""Retiring: only sealed segments past retention that every subscription has left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from control_plane.leaders.retirement import retire_segments
from core.model import Project, Segment, SegmentState, Topic
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from tests.support.world import segment, subscription

NOW = datetime(2026, 6, 1, tzinfo=UTC)


def _segment(i: int, state: SegmentState, sealed_days_ago: float | None = None) -> Segment:
    sealed = sealed_days_ago is not None
    return segment("embedded", i, state, storage=f"st{i}", partitions=1).model_copy(
        update={
            "sealed_at": NOW - timedelta(days=sealed_days_ago) if sealed else None,
            "end_positions": {0: 0} if sealed else None,
        }
    )


async def test_retires_only_what_nobody_needs_past_retention(tmp_path: Path) -> None:
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta, create_store(cluster) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="p"))
        segs = [
            _segment(1, SegmentState.SEALED, 10),  # old, left by the subscription: retired
            _segment(2, SegmentState.SEALED, 10),  # old, but the subscription still reads it
            _segment(3, SegmentState.SEALED, 0.5),  # within retention (24 h)
            _segment(4, SegmentState.ACTIVE),
        ]
        for s in segs:
            await store.create_topic(s.storage_topic, 1, retention_ms=0)
        await catalog.create_topic(Topic(project="p", name="t", retention_hours=24), segs[0])
        for s in segs[1:]:
            await catalog.add_segment("p", "t", s)
        sub = await catalog.create_subscription(subscription(url="http://127.0.0.1:9/x"))
        await catalog.move_consume_pointer(sub, 2)
        assert await retire_segments(catalog, {"embedded": store}, NOW) == [("p", "t", 1)]
        topic = await catalog.get_topic("p", "t")
        assert [s.state for s in topic.segments] == [  # the timeline keeps the retired one
            SegmentState.RETIRED,
            SegmentState.SEALED,
            SegmentState.SEALED,
            SegmentState.ACTIVE,
        ]
        assert await store.partitions("st1") is None and await store.partitions("st2") == 1
        assert await retire_segments(catalog, {"embedded": store}, NOW) == []

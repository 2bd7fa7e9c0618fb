"""One round of a verified migration's check: plan both sides, compare them, store the
windows (``httpbus topic migration check``; docs/migrating.md).

A round fixes ``as_of`` first, then the ends of both sides: everything stored before
``as_of`` is read, and a window counts as closed only once its end plus the session gap lies
before ``as_of`` (a message still in flight then carries an earlier ``produced_at`` only
within the gap). A round reads from where the windows still open need it
(``core.migration.read_from_ms``: closed verdicts are final), so its cost follows the open
windows, not the length of the dual write; ``--rerun`` reads both sides whole. The Spark part
(:mod:`spark.migration_job`) is imported when a round runs, so this module loads without
pyspark.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any

from control_plane.services.export_plan import plan_segment
from core.errors import NotFound
from core.migration import Migration, MigrationWindow, read_from_ms
from core.model import utcnow
from metastore.catalog import Catalog
from metastore.config import MetaStoreConfig, open_metastore
from metastore.migrations import MigrationRecords
from metastore.protocol import MetaStore
from reports.migration_windows import MigrationWindows
from segments.config import ClusterConfig
from segments.protocol import SegmentStore
from segments.registry import open_store
from spark.plan import TimelinePlan


@dataclass(frozen=True)
class Sides:
    """What one round reads: the migration as it was, both sides' plans, and when."""

    migration: Migration
    legacy: TimelinePlan
    bus: TimelinePlan
    as_of_ms: int


async def plan_sides(
    meta: MetaStore,
    clusters: Mapping[str, ClusterConfig],
    stores: Mapping[str, SegmentStore],
    project: str,
    topic: str,
    *,
    rerun: bool = False,
) -> Sides:
    """Both sides of ``project/topic``'s migration, planned now (``stores``: started
    stores of the clusters of its two segments): from where the open windows need them
    (``core.migration.read_from_ms``), or whole for a ``rerun``."""
    as_of_ms = int(time.time() * 1000)
    t = await Catalog(meta).get_topic(project, topic)  # NotFound names the topic
    found = await MigrationRecords(meta).get(project, topic)
    if found is None:
        raise NotFound(f"topic {project}/{topic} has had no migration")
    migration = found[0]
    external, shadow = t.segment(migration.external_segment), t.segment(migration.shadow_segment)
    if external is None or shadow is None:
        raise NotFound(f"a segment of migration {migration.id} of {project}/{topic} is gone")
    # Both sides whole: the legacy topic past the switch's seal (dual writes go on during
    # the guard period) and the shadow segment from 0, whatever its readers skip.
    since = None if rerun else read_from_ms(migration.windows, migration.session_gap_s * 1000)
    legacy = await plan_segment(
        clusters, stores, external, since_ms=since, starts=migration.legacy_start, live=True
    )
    bus = await plan_segment(clusters, stores, shadow, since_ms=since, live=True)
    return Sides(
        migration,
        TimelinePlan(project=project, topic=topic, segments=[legacy]),
        TimelinePlan(project=project, topic=topic, segments=[bus]),
        as_of_ms,
    )


async def plan_with(
    config: MetaStoreConfig,
    clusters: Mapping[str, ClusterConfig],
    project: str,
    topic: str,
    *,
    rerun: bool = False,
) -> Sides:
    """:func:`plan_sides` with a metastore and the stores opened from the configuration."""
    async with open_metastore(config) as meta, AsyncExitStack() as stack:
        t = await Catalog(meta).get_topic(project, topic)
        wanted = {s.cluster for s in t.segments} & set(clusters)
        stores = {c: await stack.enter_async_context(open_store(clusters[c])) for c in wanted}
        return await plan_sides(meta, clusters, stores, project, topic, rerun=rerun)


def compare(spark: Any, sides: Sides) -> list[MigrationWindow]:
    """The windows of one round (runs Spark)."""
    from spark.migration_job import check

    m = sides.migration
    return check(
        spark,
        sides.legacy,
        sides.bus,
        window_ms=m.window_s * 1000,
        gap_ms=m.session_gap_s * 1000,
        as_of_ms=sides.as_of_ms,
    )


async def store_windows(
    meta: MetaStore,
    sides: Sides,
    windows: list[MigrationWindow],
    *,
    rerun: bool,
    history: MigrationWindows | None = None,
) -> Migration:
    """Store a round's windows on the migration (see ``core.migration.merge_windows``), and
    in ``history`` as the migration kept them (every window, beyond the newest 200)."""
    m = sides.migration
    stored = await MigrationRecords(meta).record_check(
        m.project, m.topic, windows, utcnow, rerun=rerun
    )
    if history is not None:
        judged = {w.start_ms for w in windows}
        kept = [w for w in stored.windows if w.start_ms in judged]
        await asyncio.to_thread(history.save, stored, kept, int(time.time() * 1000))
    return stored


async def store_with(
    config: MetaStoreConfig,
    sides: Sides,
    windows: list[MigrationWindow],
    *,
    rerun: bool,
    database_url: str | None = None,
) -> Migration:
    """:func:`store_windows` with a metastore opened from the configuration, and the report
    database at ``database_url`` for the history."""
    history = MigrationWindows.from_url(database_url) if database_url else None
    try:
        async with open_metastore(config) as meta:
            return await store_windows(meta, sides, windows, rerun=rerun, history=history)
    finally:
        if history is not None:
            history.close()

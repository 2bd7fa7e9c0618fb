"""A verified migration's check over its two segments (issue 23; :mod:`spark.migration`).

The caller (``httpbus topic migration check``, :mod:`control_plane.leaders.migration_check`)
resolves the two sides into plans: the external segment from the positions where the
migration began (the legacy side) and the shadow segment from its beginning (the httpbus
side). This job reads both with :func:`spark.messages.read_timeline` and compares them window
by window with :func:`spark.migration.compare_windows`. A round reads both sides whole (up to
the ends fixed in the plans), so a re-run judges the same messages the same way.
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from core.migration import MigrationWindow

from .messages import read_timeline
from .migration import compare_windows
from .plan import TimelinePlan


def check(
    spark: SparkSession,
    legacy: TimelinePlan,
    bus: TimelinePlan,
    *,
    window_ms: int,
    gap_ms: int,
    as_of_ms: int,
    max_ids: int = 1_000,
) -> list[MigrationWindow]:
    """The windows of both sides as of ``as_of_ms``, oldest first."""
    return compare_windows(
        read_timeline(spark, legacy),
        read_timeline(spark, bus),
        window_ms=window_ms,
        gap_ms=gap_ms,
        as_of_ms=as_of_ms,
        max_ids=max_ids,
    )

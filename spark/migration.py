"""The window check of a verified migration (issue 23, item 4; docs/migrating.md).

During a dual-write period the legacy producers write the external segment and the producers
that moved publish through httpbus, both with the same ids. This job compares the two sides
(two frames of :func:`spark.messages.read_timeline`, or any frames with ``id`` and
``produced_at``) window by window, as eBay's BES2 did before switching a topic:

- every id is judged once, in the **tumbling window** (``window_ms``; an hour in production,
  minutes in tests) of its first appearance on either side;
- **matched**: seen on both sides; **late**: matched, but the second side saw it more than the
  **session gap** (``gap_ms``) after the first; **missing_in_bus** / **missing_in_legacy**:
  seen on one side only; **duplicates**: copies beyond the first on either side;
- a window is **closed** once its end plus the gap has passed (``as_of_ms``): before that a
  missing id may still arrive; it is **clean** when closed with nothing missing and nothing
  late (duplicates are reported, not dirty: both sides deliver at least once).

:func:`clean_streak` (:mod:`core.migration`, with the window model) counts the closed clean
windows at the end of the list: the switch waits for N of them. Ids of each finding are
listed up to ``max_ids`` per window (counts are exact). :mod:`spark.migration_job` runs this
over a migration's two segments, and the control plane's leader switches or rolls back on the
stored windows (``control_plane.leaders.migration_monitor``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.migration import MigrationWindow as WindowReport
from core.migration import clean_streak

__all__ = ["WindowReport", "clean_streak", "compare_windows"]


def _side(frame: DataFrame, name: str) -> DataFrame:
    """Per id: the first time this side saw it (ms) and how many copies it has."""
    return frame.groupBy("id").agg(
        F.min(F.unix_millis("produced_at")).alias(f"{name}_ms"),
        F.count("*").alias(f"{name}_copies"),
    )


def compare_windows(
    legacy: DataFrame,
    bus: DataFrame,
    *,
    window_ms: int,
    gap_ms: int,
    as_of_ms: int,
    max_ids: int = 1_000,
) -> list[WindowReport]:
    """The windows of both sides' messages, oldest first (see the module doc)."""
    joined = _side(legacy, "legacy").join(_side(bus, "bus"), "id", "full_outer")
    first = F.least("legacy_ms", "bus_ms")  # least() skips nulls
    both = F.col("legacy_ms").isNotNull() & F.col("bus_ms").isNotNull()
    late = both & (F.abs(F.col("bus_ms") - F.col("legacy_ms")) > gap_ms)
    judged = joined.select(
        "id",
        (F.floor(first / window_ms) * window_ms).alias("start"),
        both.alias("matched"),
        late.alias("late"),
        F.col("bus_ms").isNull().alias("no_bus"),
        F.col("legacy_ms").isNull().alias("no_legacy"),
        (
            F.greatest(F.coalesce("legacy_copies", F.lit(1)) - 1, F.lit(0))
            + F.greatest(F.coalesce("bus_copies", F.lit(1)) - 1, F.lit(0))
        ).alias("extra"),
    )

    def ids_where(flag: str) -> Column:
        found = F.collect_list(F.when(F.col(flag), F.col("id")))
        return F.slice(F.array_sort(found), 1, max_ids)

    rows = (
        judged.groupBy("start")
        .agg(
            F.sum(F.col("matched").cast("int")).alias("matched"),
            F.sum(F.col("late").cast("int")).alias("late"),
            F.sum(F.col("no_bus").cast("int")).alias("missing_in_bus"),
            F.sum(F.col("no_legacy").cast("int")).alias("missing_in_legacy"),
            F.sum("extra").alias("duplicates"),
            ids_where("no_bus").alias("missing_in_bus_ids"),
            ids_where("no_legacy").alias("missing_in_legacy_ids"),
            ids_where("late").alias("late_ids"),
        )
        .orderBy("start")
        .collect()
    )
    return [
        WindowReport(
            start_ms=int(r["start"]),
            end_ms=int(r["start"]) + window_ms,
            matched=int(r["matched"]),
            late=int(r["late"]),
            missing_in_bus=int(r["missing_in_bus"]),
            missing_in_legacy=int(r["missing_in_legacy"]),
            duplicates=int(r["duplicates"]),
            closed=int(r["start"]) + window_ms + gap_ms <= as_of_ms,
            missing_in_bus_ids=list(r["missing_in_bus_ids"]),
            missing_in_legacy_ids=list(r["missing_in_legacy_ids"]),
            late_ids=list(r["late_ids"]),
        )
        for r in rows
    ]

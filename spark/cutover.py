"""Cutover verification: the seal splits the messages, and every group keeps its order across it.

For each boundary (a sealed segment and its successor, from the topic's timeline; for a
failover, the time of the switch is when the old segment was left unsealed, and in
``available`` mode order across it may break by design, so only placement is checked):

- **misplaced**: a message of the old segment accepted after the seal (more than ``skew_ms``
  late: the producers' clocks and the metastore's differ a little), or written at or past the
  sealed end position of its partition; a message of the new segment accepted before
  ``sealed_at - switch_window_ms``. Why a window: a produce request takes its time when it
  arrives, and requests that arrive during SWITCH wait and go to the new segment, so they are
  accepted (by that clock) before the seal. The window is the bound of that wait.
- **order**: per subscription and group with messages on both sides, the first deliveries,
  ordered by time, must follow the produce order ``(segment, position)``; a delivery that comes
  after one of a later message breaks it (the finding names the message delivered too late).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from core.audit import AuditCutover, AuditType, CutoverCheck, Finding, FindingKind

from .schema import distinct_events


def verify_cutovers(
    events: DataFrame,
    cutovers: Sequence[AuditCutover],
    *,
    skew_ms: int = 1_000,
    switch_window_ms: int = 30_000,
    dedupe: bool = True,
) -> list[CutoverCheck]:
    """One check per cutover of ``cutovers``."""
    if not cutovers:
        return []
    events = (distinct_events(events) if dedupe else events).cache()
    try:
        return [_verify(events, c, skew_ms, switch_window_ms) for c in cutovers]
    finally:
        events.unpersist()


def _mine(events: DataFrame, c: AuditCutover) -> DataFrame:
    return events.where(
        (F.col("project") == c.project)
        & (F.col("topic") == c.topic)
        & F.col("segment").isin(c.from_segment, c.to_segment)
    )


def _verify(events: DataFrame, c: AuditCutover, skew_ms: int, window_ms: int) -> CutoverCheck:
    mine = _mine(events, c)
    accepted = (
        mine.where(F.col("type") == AuditType.ACCEPTED.value)
        .groupBy("message_id", "segment", "partition", "position", "group")
        .agg(F.min("at_ms").alias("accepted_at"))
        .cache()
    )
    old, new = F.col("segment") == c.from_segment, F.col("segment") == c.to_segment
    past_end = _past_end(c)
    misplaced_rows = (
        accepted.where(
            (old & ((F.col("accepted_at") > c.sealed_at_ms + skew_ms) | past_end))
            | (new & (F.col("accepted_at") < c.sealed_at_ms - window_ms))
        )
        .orderBy("accepted_at", "message_id")
        .collect()
    )
    findings = [
        Finding(
            kind=FindingKind.MISPLACED,
            subscription=None,
            message_id=r["message_id"],
            accepted_at_ms=r["accepted_at"],
            detail=f"segment {r['segment']} partition {r['partition']} position {r['position']}",
        )
        for r in misplaced_rows
    ]
    counts = {
        r["segment"]: r["n"]
        for r in accepted.groupBy("segment").count().withColumnRenamed("count", "n").collect()
    }
    groups = (
        accepted.where(F.col("group").isNotNull())
        .groupBy("group")
        .agg(F.countDistinct("segment").alias("sides"))
        .where(F.col("sides") == 2)
        .select("group")
    )
    if c.check_order:
        findings += _order_breaks(mine, groups)
    accepted.unpersist()
    return CutoverCheck(
        cutover=c,
        old_segment_messages=int(counts.get(c.from_segment, 0)),
        new_segment_messages=int(counts.get(c.to_segment, 0)),
        groups_across=groups.count(),
        findings=findings,
    )


def _past_end(c: AuditCutover) -> Column:
    cond = F.lit(False)
    for partition, end in c.end_positions.items():
        cond = cond | ((F.col("partition") == int(partition)) & (F.col("position") >= end))
    return cond


def _order_breaks(mine: DataFrame, groups: DataFrame) -> list[Finding]:
    delivered = (
        mine.where(F.col("type") == AuditType.DELIVERED.value)
        .join(F.broadcast(groups), "group")
        .groupBy("subscription", "group", "message_id", "segment", "position")
        .agg(F.min("at_ms").alias("delivered_at"))
    )
    order = Window.partitionBy("subscription", "group").orderBy(
        "delivered_at", "segment", "position"
    )
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    here = F.struct("segment", "position")
    rows = (
        delivered.withColumn("prev_max", F.max(here).over(before))
        .where(F.col("prev_max").isNotNull() & (here < F.col("prev_max")))
        .orderBy("subscription", "group", "delivered_at")
        .collect()
    )
    return [
        Finding(
            kind=FindingKind.ORDER,
            subscription=r["subscription"],
            message_id=r["message_id"],
            terminal_at_ms=r["delivered_at"],
            detail=(
                f"group {r['group']}: segment {r['segment']} position {r['position']} delivered "
                f"after segment {r['prev_max']['segment']} position {r['prev_max']['position']}"
            ),
        )
        for r in rows
    ]

"""The reconciliation: every accepted message reaches a terminal outcome on every subscription.

**What is expected.** The trail has no filters and no subscription list, so the job is given the
subscriptions (``httpbus audit run`` reads them from the metastore): a subscription expects every
message accepted on its topic from its creation on. It does not evaluate its filter: a worker
emits a ``filtered`` event for every message its filter drops, and ``filtered`` is terminal. So
expected = (accepted on topic T in the window) x (subscriptions of T created before), and each
expected pair must reach ``delivered``, ``filtered`` or ``dead_lettered`` within the horizon:

- **late**: its first terminal event came after ``accepted + horizon``;
- **lost**: no terminal event, and ``as_of`` is past ``accepted + horizon``;
- **pending**: no terminal event yet, the horizon not passed (in flight; not a finding);
- **duplicate**: ``delivered`` more than once (exact copies of an event, which the sink may write
  twice, are removed first).

A terminal event whose message has no ``accepted`` event counts as ``unaccepted``, never as a
finding: the trail is best effort (a crashed producer loses the events it had not flushed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from core.audit import (
    AuditSubscription,
    AuditType,
    Finding,
    FindingKind,
    Reconciliation,
    SubscriptionTally,
)

from .schema import distinct_events

COLUMNS = ["type", "message_id", "project", "topic", "subscription", "at_ms"]
MAX_LISTED = 10_000
"""Findings listed per kind (the counts stay exact beyond it)."""


def subscriptions_frame(spark: SparkSession, subs: Sequence[AuditSubscription]) -> DataFrame:
    rows = [(s.name, s.topic_project, s.topic, s.created_at_ms) for s in subs]
    schema = "sub string, sub_project string, sub_topic string, created_at_ms long"
    return spark.createDataFrame(rows, schema)


def _expected(events: DataFrame, subs: DataFrame, since_ms: int, until_ms: int) -> DataFrame:
    accepted = (
        events.where(
            (F.col("type") == AuditType.ACCEPTED.value)
            & (F.col("at_ms") >= since_ms)
            & (F.col("at_ms") < until_ms)
        )
        .groupBy("message_id", "project", "topic")
        .agg(F.min("at_ms").alias("accepted_at"))
    )
    on = (accepted.project == subs.sub_project) & (accepted.topic == subs.sub_topic)
    return (
        accepted.join(F.broadcast(subs), on)
        .where(F.col("accepted_at") >= F.col("created_at_ms"))
        .select(F.col("sub").alias("subscription"), "message_id", "accepted_at")
    )


def _terminal(events: DataFrame) -> DataFrame:
    """Per subscription and message: the first terminal event, its kind, the deliveries."""
    kinds = [AuditType.DELIVERED.value, AuditType.FILTERED.value, AuditType.DEAD_LETTERED.value]
    terminal = events.where(F.col("type").isin(kinds) & F.col("subscription").isNotNull())
    first = F.min_by("type", "at_ms")
    return terminal.groupBy("subscription", "message_id").agg(
        F.min("at_ms").alias("terminal_at"),
        first.alias("outcome"),
        F.sum((F.col("type") == AuditType.DELIVERED.value).cast("int")).alias("deliveries"),
    )


def reconcile(
    events: DataFrame,
    subs: DataFrame,
    *,
    since_ms: int,
    until_ms: int,
    as_of_ms: int,
    horizon_ms: int,
    dedupe: bool = True,
) -> Reconciliation:
    """Reconcile ``events`` (audit events, any source) against ``subs``
    (:func:`subscriptions_frame`) for messages accepted in ``[since_ms, until_ms)``."""
    events = (distinct_events(events, COLUMNS) if dedupe else events.select(*COLUMNS)).cache()
    try:
        terminal = _terminal(events)
        expected = _expected(events, subs, since_ms, until_ms)
        joined = expected.join(terminal, ["subscription", "message_id"], "left")
        status = (
            F.when(
                F.col("terminal_at").isNull(),
                F.when(F.lit(as_of_ms) - F.col("accepted_at") > horizon_ms, "lost").otherwise(
                    "pending"
                ),
            )
            .when(F.col("terminal_at") - F.col("accepted_at") > horizon_ms, "late")
            .otherwise(F.col("outcome"))
        )
        judged = joined.withColumn("status", status).withColumn(
            "dups", F.greatest(F.coalesce(F.col("deliveries"), F.lit(0)) - 1, F.lit(0))
        )
        judged = judged.cache()
        tallies = _tallies(judged)
        findings = _findings(judged)
        unaccepted = (
            terminal.join(expected, ["subscription", "message_id"], "left_anti")
            .join(
                events.where(F.col("type") == AuditType.ACCEPTED.value).select("message_id"),
                "message_id",
                "left_anti",
            )
            .count()
        )
        judged.unpersist()
        return Reconciliation(
            since_ms=since_ms,
            until_ms=until_ms,
            as_of_ms=as_of_ms,
            horizon_ms=horizon_ms,
            events=events.count(),
            unaccepted=unaccepted,
            tallies=tallies,
            findings=findings,
        )
    finally:
        events.unpersist()


def _tallies(judged: DataFrame) -> list[SubscriptionTally]:
    def count(status: str) -> Column:
        return F.sum((F.col("status") == status).cast("int")).alias(status)

    statuses = ["delivered", "filtered", "dead_lettered", "late", "lost", "pending"]
    rows = (
        judged.groupBy("subscription")
        .agg(
            F.count(F.lit(1)).alias("expected"),
            *(count(s) for s in statuses),
            F.sum("dups").alias("duplicates"),
        )
        .orderBy("subscription")
        .collect()
    )
    return [SubscriptionTally(**{k: v or 0 for k, v in r.asDict().items()}) for r in rows]


def _findings(judged: DataFrame) -> list[Finding]:
    """Lost, late and duplicate messages in one query (up to MAX_LISTED of each kind)."""
    cols = ["subscription", "message_id", "accepted_at", "terminal_at", "deliveries", "status"]
    flagged = judged.where(F.col("status").isin("lost", "late") | (F.col("dups") > 0))
    rows = flagged.select(*cols, "dups").orderBy("subscription", "accepted_at", "message_id")
    out: dict[FindingKind, list[Finding]] = {k: [] for k in FindingKind}
    for r in rows.limit(3 * MAX_LISTED).collect():
        row = r.asDict()
        kinds = [FindingKind(row["status"])] if row["status"] in ("lost", "late") else []
        kinds += [FindingKind.DUPLICATE] if row["dups"] else []
        for kind in kinds:
            if len(out[kind]) < MAX_LISTED:
                out[kind].append(_finding(kind, row))
    return [
        f for kind in (FindingKind.LOST, FindingKind.LATE, FindingKind.DUPLICATE) for f in out[kind]
    ]


def _finding(kind: FindingKind, row: dict[str, Any]) -> Finding:
    return Finding(
        kind=kind,
        subscription=str(row["subscription"]),
        message_id=str(row["message_id"]),
        accepted_at_ms=row["accepted_at"],
        terminal_at_ms=row["terminal_at"],
        count=int(row["deliveries"] or 1) if kind is FindingKind.DUPLICATE else 1,
    )

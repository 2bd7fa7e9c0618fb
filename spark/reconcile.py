"""The reconciliation: every accepted message reaches a terminal outcome on every subscription.

**What is expected.** The trail has no filters and no subscription list, so the job is given the
subscriptions (``httpbus audit run`` reads them from the metastore): a subscription expects every
message accepted on its topic from its creation on. It does not evaluate its filter: a worker
emits a ``filtered`` event for every message its filter drops, and ``filtered`` is terminal. So
expected = (accepted on topic T in the window) x (subscriptions of T created before), and each
expected pair must reach ``delivered``, ``filtered`` or ``dead_lettered`` within the horizon of
the moment it was **due**:

- **due**: the latest of its acceptance, its ``X-Deliver-At`` (``due_at_ms`` of the accepted
  event), acceptance plus the subscription's ``delay_ms``, and the next attempt of its last
  retry (``due_at_ms`` of its latest ``retried`` event: a message in a one-hour delay level is
  not late for an hour);
- **behind its group**: a grouped message is delivered only after the earlier messages of its
  group (produce order: segment, partition, position), so it is not due before the last of
  them reached its first terminal outcome; while one of them has none (pending, retrying,
  or itself lost) it is pending, never lost: the loss, if any, is the earlier message's;
- **blocked time** does not count: the horizon's clock stops while the subscription was
  paused (``paused``/``resumed`` events, and to the end if it is paused when the job runs)
  and while its circuit was open or half-open (``circuit`` events), from the due time on.
  Those events name the shard that wrote them (``shard``, ``"k/N"``) when the subscription
  has several: each shard is a state of its own, and it blocks only the messages it owns
  (:mod:`core.shards`: by the CRC32 of the group, else by the partition); an event without
  a shard blocks the whole subscription;
- **late**: its first terminal event came more than ``horizon`` of unblocked time after due;
- **lost**: no terminal event, and more than ``horizon`` of unblocked time has passed since
  due by ``as_of`` (never for a subscription paused now);
- **pending**: no terminal event yet, within that (in flight, delayed, paused; not a finding);
- **duplicate**: ``delivered`` more than once (exact copies of an event, which the sink may write
  twice, are removed first), not counting one delivery per ``resent`` event: a resend an
  operator asked for (docs/operations.md) is delivered again on purpose.

A terminal event whose message has no ``accepted`` event counts as ``unaccepted``, never as a
finding: the trail is best effort (a crashed producer loses the events it had not flushed).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.window import Window

from core.audit import (
    AuditSubscription,
    AuditType,
    Finding,
    FindingKind,
    Reconciliation,
    SubscriptionTally,
)

from .schema import distinct_events

COLUMNS = [
    "type",
    "message_id",
    "project",
    "topic",
    "subscription",
    "at_ms",
    "due_at_ms",
    "circuit_to",
    "segment",
    "partition",
    "position",
    "group",
    "shard",
]
BLOCKING_CIRCUIT = ("open", "half_open")  # deliveries wait: the horizon's clock stops
MAX_LISTED = 10_000
"""Findings listed per kind (the counts stay exact beyond it)."""


def subscriptions_frame(spark: SparkSession, subs: Sequence[AuditSubscription]) -> DataFrame:
    rows = [(s.name, s.topic_project, s.topic, s.created_at_ms, s.delay_ms, s.paused) for s in subs]
    schema = (
        "sub string, sub_project string, sub_topic string, created_at_ms long, "
        "delay_ms long, paused boolean"
    )
    return spark.createDataFrame(rows, schema)


def _expected(events: DataFrame, subs: DataFrame, until_ms: int) -> DataFrame:
    """Per subscription, the messages it expects accepted before ``until_ms`` (from its
    creation on; the caller keeps those of the window: earlier ones still hold up their
    groups), with when each was first due and where it was stored."""
    at = "at_ms"
    accepted = (
        events.where((F.col("type") == AuditType.ACCEPTED.value) & (F.col(at) < until_ms))
        .groupBy("message_id", "project", "topic")
        .agg(
            F.min(at).alias("accepted_at"),
            F.max("due_at_ms").alias("deliver_at"),
            # a message accepted twice (a producer retry) is where it was first written
            *(F.min_by(c, at).alias(c) for c in ("group", "segment", "partition", "position")),
        )
    )
    on = (accepted.project == subs.sub_project) & (accepted.topic == subs.sub_topic)
    return (
        accepted.join(F.broadcast(subs), on)
        .where(F.col("accepted_at") >= F.col("created_at_ms"))
        .select(
            F.col("sub").alias("subscription"),
            "message_id",
            "accepted_at",
            F.greatest(
                "accepted_at",
                F.coalesce("deliver_at", "accepted_at"),
                F.col("accepted_at") + F.col("delay_ms"),
            ).alias("first_due"),
            "paused",
            "group",
            "segment",
            "partition",
            "position",
        )
    )


def _behind_group(joined: DataFrame) -> DataFrame:
    """``joined`` with ``group_done`` (when the last earlier message of its group reached its
    first terminal outcome; null: none earlier, or ungrouped) and ``held`` (an earlier
    message of its group has no terminal outcome yet)."""
    grouped = joined.where(F.col("group").isNotNull())
    order = (
        Window.partitionBy("subscription", "group")
        .orderBy("segment", "partition", "position", "accepted_at", "message_id")
        .rowsBetween(Window.unboundedPreceding, -1)
    )
    grouped = grouped.withColumn("group_done", F.max("terminal_at").over(order)).withColumn(
        "held",
        F.coalesce(F.sum(F.col("terminal_at").isNull().cast("int")).over(order), F.lit(0)) > 0,
    )
    ungrouped = (
        joined.where(F.col("group").isNull())
        .withColumn("group_done", F.lit(None).cast("long"))
        .withColumn("held", F.lit(False))
    )
    return grouped.unionByName(ungrouped)


def _retry_due(events: DataFrame) -> DataFrame:
    """Per subscription and message: when the attempt after its latest retry is due."""
    retried = events.where(
        (F.col("type") == AuditType.RETRIED.value) & F.col("due_at_ms").isNotNull()
    )
    return retried.groupBy("subscription", "message_id").agg(
        F.max_by("due_at_ms", "at_ms").alias("retry_due")
    )


def _blocked(events: DataFrame, as_of_ms: int) -> DataFrame:
    """Per subscription and shard, the intervals [start, end) in which it delivered nothing on
    purpose: paused, disabled (a failing endpoint: the whole subscription), or its circuit
    open or half-open. Each kind of event of each shard is a state of its own; a state lasts
    until the next event of that kind and shard (or ``as_of``): one shard's circuit closing
    does not end another's open interval. ``shard_index``/``shard_count`` are null for an
    event of the whole subscription."""
    circuit = events.where(F.col("type") == AuditType.CIRCUIT.value).select(
        "subscription",
        "shard",
        "at_ms",
        F.lit("circuit").alias("kind"),
        F.col("circuit_to").isin(*BLOCKING_CIRCUIT).alias("blocked"),
    )
    pause_types = [AuditType.PAUSED.value, AuditType.RESUMED.value]
    pause = events.where(F.col("type").isin(pause_types)).select(
        "subscription",
        "shard",
        "at_ms",
        F.lit("pause").alias("kind"),
        (F.col("type") == AuditType.PAUSED.value).alias("blocked"),
    )
    disable_types = [AuditType.DISABLED.value, AuditType.ENABLED.value]
    disable = events.where(F.col("type").isin(disable_types)).select(
        "subscription",
        F.lit(None).cast("string").alias("shard"),  # a disabled subscription: every shard
        "at_ms",
        F.lit("disable").alias("kind"),
        (F.col("type") == AuditType.DISABLED.value).alias("blocked"),
    )
    states = (
        circuit.unionByName(pause).unionByName(disable).where(F.col("subscription").isNotNull())
    )
    order = Window.partitionBy("subscription", "shard", "kind").orderBy("at_ms")
    # "k/N" (core.shards.Shard.label); anything else parses to null: the whole subscription
    label = F.split(F.col("shard"), "/")
    return (
        states.withColumn("end", F.coalesce(F.lead("at_ms").over(order), F.lit(as_of_ms)))
        .where(F.col("blocked"))
        .select(
            "subscription",
            F.col("at_ms").alias("start"),
            "end",
            label.getItem(0).try_cast("int").alias("shard_index"),
            label.getItem(1).try_cast("int").alias("shard_count"),
        )
    )


def _owned() -> Column:
    """Whether a blocked interval's shard owns the message (:meth:`core.shards.Shard.owns`:
    the CRC32 of its group, else its partition, modulo the shard count). An interval of the
    whole subscription, or a message whose owner cannot be told (no partition in its
    accepted event), is blocked by every shard's interval: lenient, never a false loss."""
    count, index = F.col("shard_count"), F.col("shard_index")
    owner = F.when(
        F.col("group").isNotNull(), F.crc32(F.col("group").cast("binary")) % count
    ).otherwise(F.col("partition") % count)
    return count.isNull() | (count <= 0) | owner.isNull() | (owner == index)


def _blocked_time(judged: DataFrame, blocked: DataFrame) -> DataFrame:
    """``judged`` with ``blocked_ms``: the blocked time between ``due`` and ``until`` of the
    intervals of the shard that owns the message (or of the whole subscription)."""
    messages = judged.select("subscription", "message_id", "group", "partition", "due", "until")
    spans = messages.join(
        F.broadcast(blocked.withColumnRenamed("subscription", "blocked_sub")),
        (F.col("subscription") == F.col("blocked_sub")) & _owned(),
    )
    overlap = F.greatest(F.lit(0), F.least("end", "until") - F.greatest("start", "due")).cast(
        "long"
    )
    per_message = spans.groupBy("subscription", "message_id").agg(
        F.sum(overlap).alias("blocked_ms")
    )
    return judged.join(per_message, ["subscription", "message_id"], "left").withColumn(
        "blocked_ms", F.coalesce("blocked_ms", F.lit(0))
    )


def _terminal(events: DataFrame) -> DataFrame:
    """Per subscription and message: the first terminal event, its kind, the deliveries."""
    kinds = [AuditType.DELIVERED.value, AuditType.FILTERED.value, AuditType.DEAD_LETTERED.value]
    terminal = events.where(F.col("type").isin(kinds) & F.col("subscription").isNotNull())
    first = F.min_by("type", "at_ms")
    outcomes = terminal.groupBy("subscription", "message_id").agg(
        F.min("at_ms").alias("terminal_at"),
        first.alias("outcome"),
        F.sum((F.col("type") == AuditType.DELIVERED.value).cast("int")).alias("sent"),
    )
    # A delivery an operator asked for (a resend) is no duplicate: one fewer per resend.
    resends = (
        events.where(
            F.col("type").isin(AuditType.RESENT.value, AuditType.REPLAYED.value)
            & F.col("subscription").isNotNull()
        )
        .groupBy("subscription", "message_id")
        .agg(F.count("*").alias("resends"))
    )
    asked = F.coalesce(F.col("resends"), F.lit(0))
    deliveries = F.when(F.col("sent") > 0, F.greatest(F.col("sent") - asked, F.lit(1)))
    return (
        outcomes.join(resends, ["subscription", "message_id"], "left")
        .withColumn("deliveries", deliveries.otherwise(F.col("sent")))
        .drop("sent", "resends")
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
        # Messages before the window still hold up the later messages of their groups.
        in_group = _behind_group(
            _expected(events, subs, until_ms).join(terminal, ["subscription", "message_id"], "left")
        )
        expected = in_group.where(F.col("accepted_at") >= since_ms)
        joined = (
            expected.join(_retry_due(events), ["subscription", "message_id"], "left")
            .withColumn(
                "due",
                F.greatest(
                    "first_due",
                    F.coalesce("retry_due", "first_due"),
                    F.coalesce("group_done", "first_due"),
                ),
            )
            .withColumn("until", F.coalesce("terminal_at", F.lit(as_of_ms)))
        )
        joined = _blocked_time(joined, _blocked(events, as_of_ms))
        waited = F.col("until") - F.col("due") - F.col("blocked_ms")  # unblocked time since due
        status = (
            F.when(
                F.col("terminal_at").isNull(),
                F.when(~F.col("paused") & ~F.col("held") & (waited > horizon_ms), "lost").otherwise(
                    "pending"
                ),
            )
            .when(waited > horizon_ms, "late")
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

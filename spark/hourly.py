"""The hourly report: per subscription and tumbling window, the counts of every outcome, the
end-to-end latency percentiles of deliveries and the failure rate of attempts.

``accepted`` events carry no subscription: each counts for every subscription of its topic
(given, as for the reconciliation). Latency is ``delivered.at_ms - produced_at_ms``; when a
delivered event lacks ``produced_at_ms`` the batch job takes the message's ``accepted`` time
(a join the streaming job skips: a stream-stream join would hold an hour of state). A failed
attempt is an ``attempted`` event without a 2xx status (timeouts and connection errors have
none).

Two modes on the same aggregation: :func:`hourly_report` (batch, backfills) and
:func:`start_hourly_stream` (Structured Streaming from the Kafka audit topic, with a checkpoint,
results handed to a callback per micro-batch in ``update`` mode: the rows of every window that
changed, to upsert).
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from core.audit import AuditType, HourlyRow

from .schema import distinct_events

WINDOW = "1 hour"
PERCENTILES = [0.5, 0.95, 0.99]


def _is(kind: AuditType) -> Column:
    return F.col("type") == kind.value


def _per_subscription(events: DataFrame, subs: DataFrame) -> DataFrame:
    """Events with a subscription; accepted events copied onto each subscription of their topic."""
    own = events.where(F.col("subscription").isNotNull() & ~_is(AuditType.ACCEPTED))
    accepted = events.where(_is(AuditType.ACCEPTED)).drop("subscription")
    on = (accepted.project == subs.sub_project) & (accepted.topic == subs.sub_topic)
    fanned = (
        accepted.join(F.broadcast(subs), on)
        .where(F.col("at_ms") >= F.col("created_at_ms"))
        .withColumnRenamed("sub", "subscription")
        .select(*own.columns)
    )
    return own.unionByName(fanned)


def _timed(events: DataFrame) -> DataFrame:
    return events.withColumn("ts", (F.col("at_ms") / 1000).cast("timestamp"))


def _aggregate(rows: DataFrame) -> DataFrame:
    """Per window (of the event-time column ``ts``) and subscription."""
    ok = F.col("status").between(200, 299)
    latency = F.when(_is(AuditType.DELIVERED), F.col("at_ms") - F.col("produced_at_ms"))

    def count(cond: Column, name: str) -> Column:
        return F.sum(cond.cast("int")).alias(name)

    return rows.groupBy(F.window("ts", WINDOW).alias("w"), "subscription").agg(
        count(_is(AuditType.ACCEPTED), "accepted"),
        count(_is(AuditType.ATTEMPTED), "attempted"),
        count(_is(AuditType.DELIVERED), "delivered"),
        count(_is(AuditType.FILTERED), "filtered"),
        count(_is(AuditType.RETRIED), "retried"),
        count(_is(AuditType.DEAD_LETTERED), "dead_lettered"),
        count(_is(AuditType.ATTEMPTED) & ~F.coalesce(ok, F.lit(False)), "failed_attempts"),
        F.percentile_approx(latency, PERCENTILES, 10_000).alias("latency"),
    )


def _with_accepted_time(events: DataFrame) -> DataFrame:
    accepted = (
        events.where(_is(AuditType.ACCEPTED))
        .groupBy("message_id")
        .agg(F.min("at_ms").alias("_accepted_at"))
    )
    return (
        events.join(accepted, "message_id", "left")
        .withColumn("produced_at_ms", F.coalesce("produced_at_ms", "_accepted_at"))
        .drop("_accepted_at")
    )


def to_rows(aggregated: DataFrame) -> list[HourlyRow]:
    """Collect an aggregated frame as report rows."""
    out = []
    for r in aggregated.collect():
        latency = r["latency"] or [None, None, None]
        out.append(
            HourlyRow(
                window_start_ms=int(r["w"]["start"].timestamp() * 1000),
                window_end_ms=int(r["w"]["end"].timestamp() * 1000),
                subscription=r["subscription"],
                accepted=r["accepted"] or 0,
                attempted=r["attempted"] or 0,
                delivered=r["delivered"] or 0,
                filtered=r["filtered"] or 0,
                retried=r["retried"] or 0,
                dead_lettered=r["dead_lettered"] or 0,
                failed_attempts=r["failed_attempts"] or 0,
                latency_p50_ms=latency[0],
                latency_p95_ms=latency[1],
                latency_p99_ms=latency[2],
            )
        )
    return sorted(out, key=lambda row: (row.window_start_ms, row.subscription))


def hourly_report(
    events: DataFrame,
    subs: DataFrame,
    since_ms: int | None = None,
    until_ms: int | None = None,
    *,
    dedupe: bool = True,
) -> list[HourlyRow]:
    """The report of ``events`` (batch), windows of events in ``[since_ms, until_ms)``."""
    events = distinct_events(events) if dedupe else events
    if since_ms is not None:
        events = events.where(F.col("at_ms") >= since_ms)
    if until_ms is not None:
        events = events.where(F.col("at_ms") < until_ms)
    return to_rows(_aggregate(_per_subscription(_timed(_with_accepted_time(events)), subs)))


def start_hourly_stream(
    events: DataFrame,
    subs: DataFrame,
    checkpoint: str,
    sink: Callable[[list[HourlyRow]], None],
    *,
    watermark: str = "2 hours",
    trigger_s: float | None = 60.0,
) -> StreamingQuery:
    """Run the report on a streaming frame of events (:func:`.schema.stream_kafka`); every
    micro-batch hands the changed windows to ``sink``. ``trigger_s`` None processes what is
    available now and stops (``availableNow``); the checkpoint makes a restart resume."""
    deduped = _timed(events).withWatermark("ts", watermark).dropDuplicatesWithinWatermark()
    aggregated = _aggregate(_per_subscription(deduped, subs))

    def each(batch: DataFrame, batch_id: int) -> None:
        rows = to_rows(batch)
        if rows:
            sink(rows)

    writer = (
        aggregated.writeStream.outputMode("update")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(each)
    )
    if trigger_s is None:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{trigger_s} seconds")
    return writer.start()

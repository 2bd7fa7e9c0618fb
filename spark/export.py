"""Export a topic's messages to Parquet, partitioned by date and hour of ``produced_at``.

Layout: ``DIR/date=YYYY-MM-DD/hour=H/part-….parquet`` with the columns of
:data:`spark.messages.MESSAGE_COLUMNS` except the two partition ones (UTC).

**Each message exactly once.** Within an output partition (an hour) ids are unique: a message
stored twice (a producer's retry with the same ``X-Message-Id``, in one segment or across a
cutover) is written once, the copy first in the timeline (lowest segment, partition,
position). Re-runs are idempotent rather than checkpointed: the window is widened to whole
hours and every hour it covers is *replaced* (dynamic partition overwrite), so running the
same export twice, or an overlapping one, leaves one copy of every message; hours outside
the window are never touched. An hour that is still filling is complete as of the run (the
plan's ends) and the next run that covers it replaces it with what came since.

``spark-submit`` entry point (on a cluster; the plan comes from ``httpbus export --plan-out``)::

    spark-submit --jars "$(tr : , < ~/.cache/httpbus/realservices/spark-*.classpath)" \\
        --py-files httpbus.zip spark/export.py --plan plan.json --to s3a://bucket/orders \\
        --since 2026-11-24T00:00:00Z --until 2026-11-25T00:00:00Z --out result.json
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from spark.plan import whole_hours

MANIFEST = "_httpbus_export.json"
"""Written beside the data on a local folder: what the last run read and wrote (Spark's
readers skip names that start with ``_``)."""


class ExportResult(BaseModel):
    """What one run wrote: per hour (``YYYY-MM-DD/HH``) the messages, and the duplicates it
    dropped; the window actually covered (whole hours)."""

    since_ms: int | None
    until_ms: int | None
    hours: dict[str, int]
    messages: int
    duplicates: int
    seconds: float


def export_parquet(
    messages: DataFrame, out: str, *, since_ms: int | None = None, until_ms: int | None = None
) -> ExportResult:
    """Write ``messages`` (a frame of :func:`spark.messages.read_timeline`) under ``out``."""
    t0 = time.monotonic()
    since, until = whole_hours(since_ms, until_ms)
    frame = messages
    if since is not None:
        frame = frame.where(F.col("produced_at") >= F.timestamp_millis(F.lit(since)))
    if until is not None:
        frame = frame.where(F.col("produced_at") < F.timestamp_millis(F.lit(until)))
    frame = frame.withColumn("date", F.date_format("produced_at", "yyyy-MM-dd")).withColumn(
        "hour", F.hour("produced_at")
    )
    first = Window.partitionBy("date", "hour", "id").orderBy("segment", "partition", "position")
    ranked = frame.withColumn("_copy", F.row_number().over(first)).persist()
    try:
        counts = ranked.groupBy("date", "hour").agg(
            F.count(F.when(F.col("_copy") == 1, 1)).alias("n"), F.count("*").alias("all")
        )
        hours: dict[str, int] = {}
        total = 0
        for row in counts.collect():
            hours[f"{row['date']}/{row['hour']:02d}"] = row["n"]
            total += row["all"]
        (
            ranked.where(F.col("_copy") == 1)
            .drop("_copy")
            .write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("date", "hour")
            .parquet(out)
        )
    finally:
        ranked.unpersist()
    written = sum(hours.values())
    return ExportResult(
        since_ms=since,
        until_ms=until,
        hours=dict(sorted(hours.items())),
        messages=written,
        duplicates=total - written,
        seconds=time.monotonic() - t0,
    )


def earliest_ms(messages: DataFrame) -> int | None:
    """The earliest ``produced_at`` of ``messages`` (epoch ms), None if there are none: a
    followed export rewrites the hours from that one on."""
    row = messages.agg(F.min(F.unix_millis("produced_at")).alias("t")).collect()[0]
    return None if row["t"] is None else int(row["t"])


def write_manifest(out: str, result: ExportResult, plan_json: str) -> None:
    """The manifest beside a local output (skipped for remote URLs: the driver's files are not
    there)."""
    if "://" in out and not out.startswith("file://"):
        return
    folder = Path(out.removeprefix("file://"))
    text = f'{{"result": {result.model_dump_json()}, "plan": {plan_json}}}'
    (folder / MANIFEST).write_text(text)


def _instant_ms(text: str) -> int:
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def main(argv: list[str] | None = None) -> int:
    from spark.messages import read_timeline
    from spark.plan import TimelinePlan
    from spark.session import build_session

    p = argparse.ArgumentParser(prog="spark/export.py", description=__doc__)
    p.add_argument("--plan", type=Path, required=True, help="from httpbus export --plan-out")
    p.add_argument("--to", required=True, help="output folder or URL")
    p.add_argument("--since", help="RFC 3339 (UTC if no zone)")
    p.add_argument("--until", help="RFC 3339 (UTC if no zone)")
    p.add_argument("--out", type=Path, help="write the ExportResult here (JSON)")
    p.add_argument("--master", default=None, help="default: what spark-submit says")
    args = p.parse_args(argv)
    plan_json = args.plan.read_text()
    plan = TimelinePlan.model_validate_json(plan_json)
    spark: SparkSession = build_session(args.master, app_name="httpbus-export")
    result = export_parquet(
        read_timeline(spark, plan),
        args.to,
        since_ms=_instant_ms(args.since) if args.since else None,
        until_ms=_instant_ms(args.until) if args.until else None,
    )
    write_manifest(args.to, result, plan_json)
    text = result.model_dump_json()
    if args.out:
        args.out.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

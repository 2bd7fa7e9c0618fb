"""The audit events as Spark rows: the explicit schema, and the readers of the three sources.

An audit record packs many events as JSON lines (``segments.audit``): a reader splits the
value on ``"\\n"`` and parses each line with ``from_json`` and :data:`EVENT_SCHEMA` (no schema
inference: it would cost a pass over the data and guess types from a sample). Fields unknown to
this schema are ignored and missing ones are null, so a newer producer (a higher ``v``) stays
readable; a line that is not JSON parses to a null type and is dropped.

The sources:

- **Kafka** (production): the audit topic, read with the ``kafka`` source of Spark
  (``spark-sql-kafka-0-10``, passed with ``spark.jars``);
- **files** (``httpbus dev``, backfills): text files whose lines are events, e.g. the values of
  the embedded store's audit records written one after the other (``httpbus audit run`` exports
  them) -- a record's value joined by ``"\\n"`` *is* such text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

from core.audit import AuditEvent

_LONGS = {"at_ms", "produced_at_ms", "due_at_ms", "position", "size", "failing_since_ms"}
_INTS = {"v", "segment", "partition", "status", "attempt"}


def _field(name: str) -> StructField:
    kind = LongType() if name in _LONGS else IntegerType() if name in _INTS else StringType()
    return StructField(name, kind, nullable=True)


EVENT_SCHEMA = StructType([_field(name) for name in AuditEvent.model_fields])
"""One audit event (every field of :class:`core.audit.AuditEvent`), all nullable."""


def parse_lines(lines: Column) -> Column:
    """The struct of one JSON line."""
    return F.from_json(lines, EVENT_SCHEMA, {"mode": "PERMISSIVE"})


def events_from_values(values: DataFrame, column: str = "value") -> DataFrame:
    """Events of a frame of record values (string or binary): split, exploded, parsed, valid
    ones only (a type, a message id and a time)."""
    text = values.select(F.col(column).cast("string").alias("v"))
    lines = text.select(F.explode(F.split("v", "\n")).alias("line"))
    return _valid(lines.select(parse_lines(F.col("line")).alias("e")).select("e.*"))


def _valid(events: DataFrame) -> DataFrame:
    return events.where(
        F.col("type").isNotNull() & F.col("message_id").isNotNull() & F.col("at_ms").isNotNull()
    )


def read_files(spark: SparkSession, path: str) -> DataFrame:
    """Events of text files (one event per line) under ``path`` (a file, folder or glob)."""
    lines = spark.read.text(path)
    return _valid(lines.select(parse_lines(F.col("value")).alias("e")).select("e.*"))


def kafka_options(
    bootstrap: str, topic: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Options of the Kafka source for the audit topic (``extra`` wins)."""
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "failOnDataLoss": "false",  # retention may have dropped old records: not our loss
        **(extra or {}),
    }


def read_kafka(spark: SparkSession, bootstrap: str, topic: str) -> DataFrame:
    """Events of the whole audit topic as it is now (a batch read, earliest to latest)."""
    options = kafka_options(bootstrap, topic, {"endingOffsets": "latest"})
    return events_from_values(spark.read.format("kafka").options(**options).load())


def stream_kafka(
    spark: SparkSession, bootstrap: str, topic: str, max_offsets_per_trigger: int | None = None
) -> DataFrame:
    """Events of the audit topic as a stream (Structured Streaming)."""
    extra = {}
    if max_offsets_per_trigger:
        extra["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    options = kafka_options(bootstrap, topic, extra)
    return events_from_values(spark.readStream.format("kafka").options(**options).load())


def distinct_events(events: DataFrame, keep: Sequence[str] | None = None) -> DataFrame:
    """Events with the exact copies removed: the sink may write a record twice when its
    acknowledgement is lost, and a copy is no second delivery. Two deliveries of one message
    differ at least in ``at_ms``.

    ``keep`` narrows the result to those columns *before* the shuffle, and events are told apart
    by a 64-bit hash of all their fields (a collision among a billion events is a few in ten
    million): the shuffle then moves a few columns, not sixteen -- the dominant cost of a job.
    """
    if keep is None:
        return events.dropDuplicates()
    # The hash skips nulls, so the null flags go in too: (200, null) and (null, 200) differ.
    fields = [F.col(c) for c in events.columns] + [F.isnull(c) for c in events.columns]
    identity = F.xxhash64(*fields).alias("_identity")
    return events.select(*keep, identity).dropDuplicates(["_identity"]).drop("_identity")

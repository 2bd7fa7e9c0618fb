"""The segment-aware reader: a topic's timeline (a :class:`~spark.plan.TimelinePlan`) as one
DataFrame of messages, segment after segment.

Columns (:data:`MESSAGE_COLUMNS`): ``id`` (the ``x-message-id`` header, else
``<storage topic>:<partition>:<position>``), ``group`` (``x-group-id``, else the record key,
null on ungrouped topics), ``headers`` (every stored header, in order, as
``array<struct<name, value: binary>>``),
``payload`` (binary, byte for byte), ``produced_at`` (timestamp, UTC: ``x-produced-at``, else
the storage timestamp), ``segment``, ``partition``, ``position``.

**Kafka segments** are read by Spark's own ``kafka`` source (spark-sql-kafka, the jars of
``scripts/realservices/poms/spark``): ``assign`` with per-partition starting and ending offsets
(positions are offsets) and ``includeHeaders``. Spark splits the ranges into tasks itself.

**Pulsar segments** are read by pulsar-client Readers inside the executors, one task per
partition: the task opens a Reader at the range's start (``start_message_id_inclusive``),
reads while the broker has messages and stops at the first position past the range's end;
records are decoded with :mod:`core.pulsar_format`, the codec the Pulsar backend writes with.
Why not the Pulsar Spark connector (``io.streamnative.connectors:pulsar-spark-connector_2.13``,
whose versions track Spark's): it does not resolve from Maven Central here (no version is
served, not even the metadata; tried 2026-11-24 for 4.0.1.x, the line of our pyspark 4.0.1).
The Python path also keeps our own packed positions and header codec in one place, and needs
no admin API in the job (the plan carries the ends). Its cost: one task per partition, so a
Pulsar segment is read with at most ``partitions`` tasks, and every executor needs the
``pulsar-client`` wheel (``httpbus`` installs it).

Rows come in timeline order (the union keeps segment 1's Spark partitions before segment 2's);
:func:`read_timeline` with ``ordered=True`` sorts by (segment, partition, position), which is
produce order within a partition (a shuffle: only for small reads or when order matters).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from core import envelope
from core import pulsar_format as wire

from .plan import KafkaSource, PulsarSource, SegmentPlan, TimelinePlan

HEADERS_TYPE = ArrayType(
    StructType([StructField("name", StringType()), StructField("value", BinaryType())])
)
RAW_SCHEMA = StructType(
    [
        StructField("segment", IntegerType(), False),
        StructField("storage_topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("position", LongType(), False),
        StructField("timestamp_ms", LongType(), True),
        StructField("headers", HEADERS_TYPE, True),
        StructField("payload", BinaryType(), True),
        StructField("key", BinaryType(), True),
    ]
)
"""What each backend's reader yields: a stored record and where it is."""

MESSAGE_COLUMNS = [
    "id",
    "group",
    "headers",
    "payload",
    "produced_at",
    "segment",
    "partition",
    "position",
]
PULSAR_READ_TIMEOUT_MS = 30_000
"""How long a Pulsar task waits for a message the broker said is available."""

log = logging.getLogger(__name__)


def read_timeline(spark: SparkSession, plan: TimelinePlan, *, ordered: bool = False) -> DataFrame:
    """The messages of every segment of ``plan``, in timeline order (see the module doc)."""
    frames = [read_segment(spark, seg) for seg in plan.segments if seg.reads]
    if not frames:
        return spark.createDataFrame([], RAW_SCHEMA).transform(
            lambda r: messages(r, envelope.MESSAGE_ID)
        )
    out = reduce(DataFrame.unionByName, frames)
    return out.orderBy("segment", "partition", "position") if ordered else out


def read_segment(spark: SparkSession, seg: SegmentPlan) -> DataFrame:
    """The messages of one segment's ranges."""
    if isinstance(seg.source, KafkaSource):
        raw = _kafka_raw(spark, seg, seg.source)
    else:
        raw = _pulsar_raw(spark, seg, seg.source)
    return messages(raw, seg.id_header)


def messages(raw: DataFrame, id_header: str) -> DataFrame:
    """:data:`MESSAGE_COLUMNS` of raw records (:data:`RAW_SCHEMA`): the envelope headers
    decoded as :mod:`core.envelope` decodes them (latin-1, whole milliseconds)."""
    # The precedence of segments.external.ExternalStore: the httpbus id, the segment's own id
    # header, the record's address.
    fallback = F.concat_ws(":", "storage_topic", "partition", "position")
    ids = [header_text(envelope.MESSAGE_ID), header_text(id_header), fallback]
    produced = header_text(envelope.PRODUCED_AT)
    produced_ms = F.when(produced.rlike("^[0-9]+$"), produced.cast("long"))
    return raw.select(
        F.coalesce(*ids).alias("id"),
        # The group header, else the record key (which httpbus sets to the group; an external
        # segment's key is its group too, as segments.external gives it to subscriptions).
        F.coalesce(header_text(envelope.GROUP_ID), F.decode(F.col("key"), "ISO-8859-1")).alias(
            "group"
        ),
        "headers",
        "payload",
        F.timestamp_millis(F.coalesce(produced_ms, F.col("timestamp_ms"))).alias("produced_at"),
        "segment",
        "partition",
        "position",
    )


def header_text(name: str) -> Column:
    """The first header ``name`` of a row, decoded as :func:`core.envelope.decode` does."""
    found = F.filter("headers", lambda h: h["name"] == F.lit(name))
    return F.decode(F.try_element_at(found, F.lit(1))["value"], "ISO-8859-1")


# -- Kafka ----------------------------------------------------------------------------------


def kafka_options(seg: SegmentPlan, source: KafkaSource) -> dict[str, str]:
    """Options of Spark's ``kafka`` source for the segment's ranges."""
    reads = seg.reads
    topic = seg.storage_topic
    return {
        "kafka.bootstrap.servers": source.bootstrap_servers,
        **{f"kafka.{k}": v for k, v in source.client.items()},
        "assign": json.dumps({topic: sorted(reads)}),
        "startingOffsets": json.dumps({topic: {str(p): r.start for p, r in reads.items()}}),
        "endingOffsets": json.dumps({topic: {str(p): r.end for p, r in reads.items()}}),
        "includeHeaders": "true",
        # A range below the retained start is a loss the export must report, not skip.
        "failOnDataLoss": "true",
    }


def _kafka_raw(spark: SparkSession, seg: SegmentPlan, source: KafkaSource) -> DataFrame:
    records = spark.read.format("kafka").options(**kafka_options(seg, source)).load()
    headers = F.transform(
        F.coalesce("headers", F.array()),
        lambda h: F.struct(h["key"].alias("name"), h["value"].alias("value")),
    ).cast(HEADERS_TYPE)
    return records.select(
        F.lit(seg.segment).cast("int").alias("segment"),
        F.lit(seg.storage_topic).alias("storage_topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").alias("position"),
        F.unix_millis("timestamp").alias("timestamp_ms"),
        headers.alias("headers"),
        F.col("value").alias("payload"),
        F.col("key"),
    )


# -- Pulsar ---------------------------------------------------------------------------------


def _pulsar_raw(spark: SparkSession, seg: SegmentPlan, source: PulsarSource) -> DataFrame:
    tasks = [
        (
            seg.segment,
            seg.storage_topic,
            source.service_url,
            source.partition_topic(seg.storage_topic, p),
            p,
            r.start,
            r.end,
        )
        for p, r in seg.reads.items()
    ]
    rdd = spark.sparkContext.parallelize(tasks, len(tasks)).flatMap(_read_pulsar_task)
    return spark.createDataFrame(rdd, RAW_SCHEMA)


def _read_pulsar_task(task: tuple[int, str, str, str, int, int, int]) -> Iterator[tuple[Any, ...]]:
    segment, storage_topic, service_url, topic, partition, start, end = task
    for position, timestamp_ms, headers, payload, key in read_pulsar_range(
        service_url, topic, start, end
    ):
        yield (segment, storage_topic, partition, position, timestamp_ms, headers, payload, key)


def read_pulsar_range(
    service_url: str, topic: str, start: int, end: int, timeout_ms: int = PULSAR_READ_TIMEOUT_MS
) -> Iterator[tuple[int, int, list[tuple[str, bytes]], bytes, bytes | None]]:
    """``(position, timestamp_ms, headers, payload, key)`` of every message of one partition topic
    at positions ``[start, end)``, in order. Runs in an executor (blocking client)."""
    import pulsar  # in the executor: the driver of a Kafka-only job needs no client

    client = pulsar.Client(
        service_url,
        operation_timeout_seconds=max(1, timeout_ms // 1000),
        logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    )
    try:
        ledger, entry, batch = wire.unpack(start)
        first = (
            pulsar.MessageId.earliest
            if start == 0
            else pulsar.MessageId(-1, ledger, entry, batch if batch > 0 else -1)
        )
        reader = client.create_reader(topic, first, start_message_id_inclusive=True)
        try:
            while reader.has_message_available():
                msg = reader.read_next(timeout_ms)
                mid = msg.message_id()
                position = wire.pack(mid.ledger_id(), mid.entry_id(), mid.batch_index())
                if position >= end:
                    break
                if position < start:  # the rest of a batch the start lies in
                    continue
                props: dict[str, str] = msg.properties()
                yield (
                    position,
                    msg.event_timestamp() or msg.publish_timestamp(),
                    list(wire.decode_headers(props)),
                    msg.data(),
                    wire.decode_key(msg.partition_key(), props),
                )
        finally:
            _close_quietly(reader, pulsar.PulsarException)
    finally:
        _close_quietly(client, pulsar.PulsarException)


def _close_quietly(closable: Any, errors: type[Exception]) -> None:
    """Close a Pulsar reader or client whose work is over. A broker that dropped the
    connection meanwhile makes ``close()`` raise ``NotConnected`` (seen in the migration's real
    test): the range was read whole by then, or the read's own error is the one to report, so
    a refused close loses nothing and must not fail the Spark task."""
    try:
        closable.close()
    except errors as exc:
        log.info("closing a Pulsar %s: %s", type(closable).__name__, exc)

"""What the segment-aware reader reads: a topic's timeline resolved to position ranges.

The Spark jobs import only ``core``, so they never open the metastore or a ``SegmentStore``.
Whoever starts a job (``httpbus export``, :mod:`cli.export`) resolves the topic's
timeline into a :class:`TimelinePlan`: for every segment, where its storage topic lives and,
per partition, the positions ``[start, end)`` to read. The ends are fixed when the plan is
made (a sealed segment's recorded ends, else the ends at that moment), so a batch read is a
snapshot that re-runs read the same way. A plan is JSON, so ``spark-submit`` takes it as a
file. Plain pydantic: importing this module does not import pyspark.

Example (one sealed Kafka segment then an active Pulsar one)::

    TimelinePlan(project="shop", topic="orders", segments=[
        SegmentPlan(segment=1, storage_topic="shop.orders.1",
                    source=KafkaSource(bootstrap_servers="kafka:9092"),
                    ranges={0: PositionRange(start=0, end=120)}),
        SegmentPlan(segment=2, storage_topic="shop.orders.2",
                    source=PulsarSource(service_url="pulsar://pulsar:6650"),
                    ranges={0: PositionRange(start=0, end=1 << 32)}),
    ])
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

HOUR_MS = 3_600_000


def whole_hours(since_ms: int | None, until_ms: int | None) -> tuple[int | None, int | None]:
    """A window widened to whole hours (the export rewrites whole hours, so each hour it
    writes must be read complete: plan from the widened start too)."""
    since = None if since_ms is None else since_ms - since_ms % HOUR_MS
    until = None if until_ms is None else -(-until_ms // HOUR_MS) * HOUR_MS
    return since, until


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KafkaSource(_Frozen):
    """A Kafka cluster, read by Spark's ``kafka`` source (spark-sql-kafka)."""

    backend: Literal["kafka"] = "kafka"
    bootstrap_servers: str
    client: dict[str, str] = Field(
        default_factory=dict,
        description="extra Kafka client settings (security.protocol, sasl.*), passed as kafka.*",
    )


class PulsarSource(_Frozen):
    """A Pulsar cluster, read by pulsar-client Readers in the executors (see
    :mod:`spark.messages` for why not a Spark connector)."""

    backend: Literal["pulsar"] = "pulsar"
    service_url: str
    tenant: str = "public"
    namespace: str = "default"

    def partition_topic(self, storage_topic: str, partition: int) -> str:
        """The topic of one partition, named as ``segments.pulsar.config`` names it."""
        return f"persistent://{self.tenant}/{self.namespace}/{storage_topic}-partition-{partition}"


Source = Annotated[KafkaSource | PulsarSource, Field(discriminator="backend")]


class PositionRange(_Frozen):
    """Positions ``[start, end)`` of one partition."""

    start: int = Field(ge=0)
    end: int = Field(ge=0)

    @property
    def empty(self) -> bool:
        return self.start >= self.end


class SegmentPlan(_Frozen):
    """One segment of the timeline and the ranges to read from it."""

    segment: int = Field(ge=1)
    storage_topic: str
    source: Source
    ranges: dict[int, PositionRange] = Field(description="partition -> positions to read")
    id_header: str = Field(
        default="x-message-id",
        description="the header holding a message's id when it has no x-message-id (an "
        "external segment's legacy header); a message with neither gets the id "
        "'<storage topic>:<partition>:<position>' (deterministic, the same on every read)",
    )

    @property
    def reads(self) -> dict[int, PositionRange]:
        """The non-empty ranges, by partition."""
        return {p: r for p, r in sorted(self.ranges.items()) if not r.empty}


class TimelinePlan(_Frozen):
    """A topic's segments, in timeline order, with what to read from each."""

    project: str
    topic: str
    segments: list[SegmentPlan]

    @model_validator(mode="after")
    def _in_order(self) -> TimelinePlan:
        ids = [s.segment for s in self.segments]
        if ids != sorted(set(ids)):
            raise ValueError(f"segments must be distinct and in timeline order, not {ids}")
        return self


Ends = dict[int, dict[int, int]]
"""Per segment, per partition: the position a reader has read up to (exclusive)."""


def ends_of(plan: TimelinePlan) -> Ends:
    """Where reading ``plan`` whole leaves off: the checkpoint of a followed export."""
    return {s.segment: {p: r.end for p, r in s.ranges.items()} for s in plan.segments}


def after(plan: TimelinePlan, read: Ends) -> TimelinePlan:
    """``plan`` narrowed to what lies past ``read``: each range starts where the checkpoint
    left off (a segment or partition it has not seen starts where ``plan`` does)."""
    segments = []
    for seg in plan.segments:
        done = read.get(seg.segment, {})
        ranges = {
            p: PositionRange(start=max(r.start, min(done.get(p, r.start), r.end)), end=r.end)
            for p, r in seg.ranges.items()
        }
        segments.append(seg.model_copy(update={"ranges": ranges}))
    return plan.model_copy(update={"segments": segments})

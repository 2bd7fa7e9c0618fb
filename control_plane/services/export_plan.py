"""A topic's timeline resolved into a :class:`spark.plan.TimelinePlan` for the Spark reader.

For each segment, in timeline order:

- **ends**: a finished segment's recorded ends (sealed, final); otherwise the ends its store
  reports now (the active segment, or a sealed one whose Kafka seal has not settled: its
  provisional ends could be below an acknowledged record). Messages stored after the plan is
  made are not read: a batch read is a snapshot.
- **starts**: 0, or with ``since_ms`` the store's ``position_at(since_ms)``: the first
  position whose timestamp is at or after it, so every earlier position holds an older
  message (a message's storage timestamp is its ``x-produced-at``, set by the producer
  service). The reader still filters on ``produced_at``, which is what the window means.
- **skipped** (and said so in the notes): PENDING segments (a cutover's target that holds
  nothing yet) and RETIRED ones (their storage topic was deleted).

Kafka and Pulsar segments only: the embedded store of ``httpbus dev`` lives in a SQLite file
of one machine that executors cannot read, so a plan refuses it (``ValidationFailed``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from core.errors import ValidationFailed
from core.model import Segment, SegmentState
from metastore.catalog import Catalog
from segments.config import ClusterConfig, KafkaClusterConfig, PulsarClusterConfig, is_read_only
from segments.protocol import SegmentStore
from spark.plan import (
    KafkaSource,
    PositionRange,
    PulsarSource,
    SegmentPlan,
    Source,
    TimelinePlan,
)


@dataclass
class PlannedTimeline:
    plan: TimelinePlan
    notes: list[str] = field(default_factory=list)


def source_of(name: str, config: ClusterConfig) -> Source:
    """Where the Spark reader finds a cluster's storage topics."""
    if isinstance(config, KafkaClusterConfig):
        return KafkaSource(bootstrap_servers=config.bootstrap_servers, client=config.client)
    if isinstance(config, PulsarClusterConfig):
        return PulsarSource(
            service_url=config.service_url, tenant=config.tenant, namespace=config.namespace
        )
    raise ValidationFailed(
        f"cluster {name!r} is {config.backend}: Spark reads Kafka and Pulsar segments only"
    )


async def plan_timeline(
    catalog: Catalog,
    clusters: Mapping[str, ClusterConfig],
    stores: Mapping[str, SegmentStore],
    project: str,
    topic: str,
    *,
    since_ms: int | None = None,
) -> PlannedTimeline:
    """The plan of ``project/topic`` (``stores``: a started store per cluster it uses)."""
    t = await catalog.get_topic(project, topic)
    out = PlannedTimeline(TimelinePlan(project=project, topic=topic, segments=[]))
    segments: list[SegmentPlan] = []
    for seg in sorted(t.segments, key=lambda s: s.id):
        if seg.state in (SegmentState.PENDING, SegmentState.RETIRED):
            out.notes.append(f"segment {seg.id} skipped: {seg.state.value}")
            continue
        segments.append(await plan_segment(clusters, stores, seg, since_ms=since_ms))
    out.plan = TimelinePlan(project=project, topic=topic, segments=segments)
    return out


async def plan_segment(
    clusters: Mapping[str, ClusterConfig],
    stores: Mapping[str, SegmentStore],
    seg: Segment,
    *,
    since_ms: int | None = None,
    starts: Mapping[int, int] | None = None,
    live: bool = False,
) -> SegmentPlan:
    """One segment's plan; ``starts`` (per partition) moves the ranges' starts up to them
    (a verified migration reads the legacy side from where it began), ``live`` reads up to
    the store's ends now even if the segment was sealed (the legacy side after a switch)."""
    config = clusters.get(seg.cluster)
    if config is None or seg.cluster not in stores:
        raise ValidationFailed(f"segment {seg.id} is on cluster {seg.cluster!r}: not configured")
    if live:
        seg = seg.model_copy(update={"end_positions": None, "start_positions": None})
    ranges = await _ranges(stores[seg.cluster], seg, since_ms)
    if starts is not None:
        ranges = {
            p: PositionRange(start=min(max(r.start, starts.get(p, 0)), r.end), end=r.end)
            for p, r in ranges.items()
        }
    plan = SegmentPlan(
        segment=seg.id,
        storage_topic=seg.storage_topic,
        source=source_of(seg.cluster, config),
        ranges=ranges,
    )
    if is_read_only(config) and config.id_header:
        # An external segment: ids as its ExternalStore gives them to subscriptions.
        plan = plan.model_copy(update={"id_header": config.id_header.lower()})
    return plan


async def _ranges(
    store: SegmentStore, seg: Segment, since_ms: int | None
) -> dict[int, PositionRange]:
    if seg.finished and seg.end_positions is not None:
        ends = dict(seg.end_positions)
    else:
        ends = await store.end_positions(seg.storage_topic)
    ranges: dict[int, PositionRange] = {}
    for partition in range(seg.partitions):
        end = ends.get(partition, 0)
        start = 0
        if since_ms is not None and end > 0:
            start = await store.position_at(seg.storage_topic, partition, since_ms)
        start = max(start, seg.start_of(partition))  # a migration's switch or rollback
        ranges[partition] = PositionRange(start=min(start, end), end=end)
    return ranges


def clusters_of(plan_segments: list[Segment]) -> set[str]:
    """The clusters a timeline's readable segments live on."""
    readable = (SegmentState.ACTIVE, SegmentState.SEALED)
    return {s.cluster for s in plan_segments if s.state in readable}

"""The elected roles of a control plane, built from its settings in one list.

Every control plane stands for election in each role; each role leads on its own (one
``/leader/{role}`` node each) and reads what it needs from the metastore's records or the
:class:`~control_plane.services.cutovers.Cutovers` facade, never from another role:

- ``assigner`` — subscriptions to delivery workers (:mod:`.assigner`);
- ``cutover`` — drives every active cutover (:mod:`.cutover_coordinator`);
- ``failover`` — fails unhealthy segments over and seals what failovers left (:mod:`.failover`);
- ``migration`` — switches, rolls back and completes verified migrations
  (:mod:`.migration_monitor`);
- ``retirement`` — retires segments no subscription needs (:mod:`.retirement`);
- ``signing-keys`` — rotates the JWT signing keys on schedule (:mod:`.key_rotation`);
- ``archiver`` — writes the closed windows of archived topics (:mod:`.archiver`);
- ``replayer`` — replays windows of a topic into one subscription (:mod:`.replayer`);
- ``trace-indexer`` — the audit trail into the trace index (:mod:`.trace_indexer`), when
  ``trace_index`` is on.

Example::

    async with AsyncExitStack() as stack:
        context = LeaderContext(cutovers, stores, settings.member_id)
        for role in roles(settings, context, trace_index):
            await stack.enter_async_context(role)
"""

from __future__ import annotations

from functools import partial

from control_plane.leaders.archiver import Archiver
from control_plane.leaders.assigner import Assigner
from control_plane.leaders.context import LeaderContext
from control_plane.leaders.cutover_coordinator import CutoverCoordinator
from control_plane.leaders.election import LeaderElection
from control_plane.leaders.failover import FailoverMonitor
from control_plane.leaders.key_rotation import KeyRotation
from control_plane.leaders.migration_monitor import MigrationMonitor
from control_plane.leaders.replayer import Replayer
from control_plane.leaders.retirement import SegmentRetirement
from control_plane.leaders.trace_indexer import TraceIndexer
from control_plane.services.signing_keys import SigningKeys
from control_plane.settings import ControlPlaneSettings
from reports.trace import TraceIndex
from segments.audit import AuditSink
from segments.failover.health import Detection, HealthJudge


def roles(
    settings: ControlPlaneSettings, context: LeaderContext, trace_index: TraceIndex
) -> list[LeaderElection]:
    """Every role this control plane stands for (module doc), not started yet."""
    metastore, member = context.metastore, context.member_id
    found: list[LeaderElection] = [
        Assigner(
            metastore,
            context.catalog,
            member,
            settings.assign_interval_s,
            join_quiet_s=settings.assign_join_quiet_s,
        ),
        CutoverCoordinator(context),
        _failover(settings, context),
        MigrationMonitor(context),
        SegmentRetirement(context, interval_s=settings.segment_retire_interval_s),
        KeyRotation(metastore, SigningKeys(context.catalog, settings.jwt_signing), member),
        Archiver(context, settings.archive),
        Replayer(context, settings.archive),
    ]
    if settings.trace_index:
        found.append(_trace_indexer(settings, context, trace_index))
    return found


def _failover(settings: ControlPlaneSettings, context: LeaderContext) -> FailoverMonitor:
    detection = Detection(
        fail_after_s=settings.failover_after_s,
        latency_p99_ms=settings.failover_latency_p99_ms,
        latency_for_s=settings.failover_latency_for_s,
    )
    audit = settings.audit  # failovers are audited where producers and workers audit
    store = context.stores.get(audit.cluster or settings.default_cluster)
    sink = None
    if store is not None:
        sink = partial(AuditSink, store, audit.topic, partitions=audit.partitions)
    return FailoverMonitor(
        context,
        HealthJudge(detection),
        interval_s=settings.failover_check_interval_s,
        seal_retry_s=settings.failover_seal_retry_s,
        audit=sink,
    )


def _trace_indexer(
    settings: ControlPlaneSettings, context: LeaderContext, index: TraceIndex
) -> TraceIndexer:
    """The indexer of the audit topic (where the producers and workers write it)."""
    return TraceIndexer(
        context,
        context.stores[settings.audit.cluster or settings.default_cluster],
        settings.audit.topic,
        index,
        retention_s=settings.trace_retention_s,
    )

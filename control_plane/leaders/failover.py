"""Automatic failover, the leader's part (issue 20, docs/failover.md).

The process elected to the role ``failover`` runs a :class:`FailoverMonitor`. Every
``interval_s`` it

1. reads the producers' health reports (``segments.failover.records``) and asks the
   :class:`~segments.failover.health.HealthJudge` about every segment they name; when the
   *active* segment of a topic that names standby clusters is unhealthy, it starts a failover:
   a cutover with ``failover`` set (``segments.cutover.machine``), to a fresh segment on the
   first standby cluster (in the topic's order) that is not the failing one and answers a
   metadata request now (through the :class:`~control_plane.services.cutovers.Cutovers`
   facade). The cutover coordinator drives it like any cutover, minus the seal;
2. tries to seal every segment a failover left UNSEALED (one attempt at a time per segment,
   again every ``seal_retry_s``): once its cluster answers a metadata request, the store's
   ``seal`` fences it and
   waits its strict settle (a producer that missed the switch may still have a write in
   flight), and the record becomes SEALED with its final ends, so subscriptions drain it and
   move on by the normal path (and the retire job removes it later).

Each failover logs a warning, counts in ``httpbus_failovers_total`` and appends a
``failover`` audit event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from control_plane.leaders.context import ContextRole, LeaderContext
from control_plane.leaders.election import every
from core.audit import AuditEvent, AuditType
from core.errors import CutoverInProgress, HttpbusError, VersionConflict
from core.model import SegmentState, Topic, utcnow
from segments.audit import AuditSink
from segments.failover.health import HealthJudge, SegmentKey
from segments.failover.records import FailoverRecords

log = logging.getLogger(__name__)
ROLE = "failover"
PROBE_TIMEOUT_S = 2.0
SEAL_TIMEOUT_S = 120.0


class FailoverMonitor(ContextRole):
    """Detect unhealthy active segments, fail them over, seal what they left (module doc).

    ``audit`` builds the sink failovers are audited to: it is started at the first failover,
    not at start (the audit topic is created then if missing), and again at the next one if
    its cluster did not answer (a failover is then only logged and counted)."""

    def __init__(
        self,
        context: LeaderContext,
        judge: HealthJudge,
        *,
        interval_s: float = 0.5,
        seal_retry_s: float = 2.0,
        audit: Callable[[], AuditSink] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(context, ROLE)
        self.records = FailoverRecords(context.metastore)
        self.judge = judge
        self.interval_s = interval_s
        self.seal_retry_s = seal_retry_s
        self.audit = audit
        self.clock = clock
        self._sink: AuditSink | None = None
        self.failovers: Counter[tuple[str, str]] = Counter()  # (project/topic, trigger)
        self._sealing: dict[SegmentKey, asyncio.Task[None]] = {}
        self._next_seal: dict[SegmentKey, float] = {}

    def figures(self) -> dict[str, Any]:
        return {"failovers": dict(self.failovers)}

    async def aclose(self) -> None:
        await super().aclose()
        if self._sink is not None:
            sink, self._sink = self._sink, None
            await sink.aclose()

    async def lead(self, lost: asyncio.Event) -> None:
        try:
            await every(lost, self.interval_s, self.check_once, "failover check")
        finally:
            tasks, self._sealing = list(self._sealing.values()), {}
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def check_once(self) -> None:
        """One round: judge the reported segments, then seal what failovers left."""
        now = self.clock()
        for key, reports in (await self.records.reports()).items():
            reason = self.judge.verdict(key, reports, now)
            if reason is not None:
                await self._fail_over(key, reason)
        for key in await self.records.unsealed():
            task = self._sealing.get(key)
            if (task is None or task.done()) and self._next_seal.get(key, 0.0) <= now:
                self._next_seal[key] = now + self.seal_retry_s
                self._sealing[key] = asyncio.create_task(self._seal(key))

    async def _fail_over(self, key: SegmentKey, reason: str) -> None:
        project, name, segment_id = key
        topic = await self.catalog.get_topic(project, name)
        active = topic.active_segment
        if topic.failover is None or active is None or active.id != segment_id:
            self.judge.forget(key)  # no standby, or it moved on already
            return
        target = await self._target(topic, active.cluster)
        if target is None:
            log.warning("%s/%s: segment %s is unhealthy (%s) and no standby cluster answers",
                        project, name, segment_id, reason)  # fmt: skip
            return
        try:
            state = await self.cutovers.start(
                project,
                name,
                target,
                active.partitions,
                failover=f"{active.cluster} unhealthy: {reason}",
                from_segment=segment_id,
            )
        except (CutoverInProgress, VersionConflict) as exc:
            log.info("%s/%s: failover waits: %s", project, name, exc)
            return
        self.judge.forget(key)
        trigger = "latency" if reason.startswith("write latency") else "failures"
        self.failovers[(f"{project}/{name}", trigger)] += 1
        log.warning("failover %s of %s/%s: segment %s on %s → segment %s on %s (%s)", state.id,
                    project, name, segment_id, active.cluster, state.to_segment, target,
                    reason)  # fmt: skip
        sink = await self._audit_sink()
        if sink is not None:
            sink.emit(
                AuditEvent(
                    type=AuditType.FAILOVER,
                    message_id="",
                    project=project,
                    topic=name,
                    segment=segment_id,
                    at_ms=int(self.clock() * 1000),
                    reason=f"to segment {state.to_segment} on {target}: {reason}",
                )
            )

    async def _audit_sink(self) -> AuditSink | None:
        if self._sink is None and self.audit is not None:
            sink = self.audit()
            try:
                await sink.start()
            except HttpbusError as exc:
                log.warning("failover not audited: %s", exc)
                return None
            self._sink = sink
        return self._sink

    async def _target(self, topic: Topic, failing: str) -> str | None:
        """The first standby cluster, in the topic's order, that answers now."""
        assert topic.failover is not None
        for cluster in topic.failover.clusters:
            store = self.stores.get(cluster)
            if cluster == failing or store is None:
                continue
            try:
                async with asyncio.timeout(PROBE_TIMEOUT_S):
                    await store.partitions(f"{self.cutovers.prefix}.failover-probe")
            except (TimeoutError, HttpbusError) as exc:
                log.warning("standby cluster %s does not answer: %s", cluster, exc)
                continue
            return cluster
        return None

    async def _seal(self, key: SegmentKey) -> None:
        """Seal a segment a failover left unsealed, if its cluster answers (module doc)."""
        project, name, segment_id = key
        try:
            topic = await self.catalog.get_topic(project, name)
            segment = topic.segment(segment_id)
            if segment is None or segment.state is not SegmentState.UNSEALED:
                await self.records.sealed(key)
                return
            store = self.stores.get(segment.cluster)
            if store is None:
                return
            # A metadata request first: the seal's admin requests are sent only to a cluster
            # that answers (librdkafka mishandles admin requests piled up on a frozen broker).
            async with asyncio.timeout(PROBE_TIMEOUT_S * 5):
                await store.partitions(segment.storage_topic)
            t0 = time.perf_counter()
            async with asyncio.timeout(SEAL_TIMEOUT_S):
                ends = await store.seal(segment.storage_topic)
            sealed = segment.model_copy(
                update={
                    "state": SegmentState.SEALED,
                    "sealed_at": utcnow(),
                    "end_positions": ends,
                    "ends_final": True,
                }
            )
            await self.catalog.update_segment(project, name, sealed)
            await self.records.sealed(key)
            self._next_seal.pop(key, None)
            log.warning("%s/%s: unsealed segment %s sealed in %.0f ms, ends %s", project, name,
                        segment_id, 1000 * (time.perf_counter() - t0), ends)  # fmt: skip
        except (TimeoutError, HttpbusError) as exc:
            log.info("%s/%s: segment %s stays unsealed for now: %s", project, name, segment_id,
                     exc)  # fmt: skip

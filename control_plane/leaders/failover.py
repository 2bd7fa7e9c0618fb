"""Automatic failover, the leader's part (issue 20, docs/failover.md).

While it leads the cutovers, the coordinator runs a :class:`FailoverMonitor`. Every
``interval_s`` it

1. reads the producers' health reports (``segments.failover.records``) and asks the
   :class:`~segments.failover.health.HealthJudge` about every segment they name; when the
   *active* segment of a topic that names standby clusters is unhealthy, it starts a failover:
   a cutover with ``failover`` set (``segments.cutover.machine``), to a fresh segment on the
   first standby cluster (in the topic's order) that is not the failing one and answers a
   metadata request now. The coordinator drives it like any cutover, minus the seal;
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
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from control_plane.leaders.election import rest
from core.audit import AuditEvent, AuditType
from core.errors import CutoverInProgress, HttpbusError, VersionConflict
from core.model import SegmentState, Topic, utcnow
from segments.audit import AuditSink
from segments.failover.health import HealthJudge, SegmentKey
from segments.failover.records import FailoverRecords
from segments.protocol import SegmentStore

if TYPE_CHECKING:
    from control_plane.leaders.cutovers import Cutovers

log = logging.getLogger(__name__)
PROBE_TIMEOUT_S = 2.0
SEAL_TIMEOUT_S = 120.0


class FailoverMonitor:
    """Detect unhealthy active segments, fail them over, seal what they left (module doc)."""

    def __init__(
        self,
        cutovers: Cutovers,
        stores: Mapping[str, SegmentStore],
        judge: HealthJudge,
        *,
        interval_s: float = 0.5,
        seal_retry_s: float = 2.0,
        audit: Callable[[], Awaitable[AuditSink | None]] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cutovers = cutovers
        self.catalog = cutovers.catalog
        self.records = FailoverRecords(cutovers.metastore)
        self.stores = stores
        self.judge = judge
        self.interval_s = interval_s
        self.seal_retry_s = seal_retry_s
        self.audit = audit  # opens the audit sink on first use
        self.clock = clock
        self.failovers: Counter[tuple[str, str]] = Counter()  # (project/topic, trigger)
        self._sealing: dict[SegmentKey, asyncio.Task[None]] = {}
        self._next_seal: dict[SegmentKey, float] = {}

    async def run(self, lost: asyncio.Event) -> None:
        try:
            while not lost.is_set():
                try:
                    await self.check_once()
                except HttpbusError as exc:
                    log.warning("failover check: %s", exc)
                await rest(lost, self.interval_s)
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
        sink = None if self.audit is None else await self.audit()
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

"""The producer's half of the failover detection: report its write figures per segment.

:class:`~segments.failover.health.WriteHealth` counts every write the segment writer makes;
every ``interval_s`` this reporter writes one :class:`~segments.failover.health.HealthReport`
per segment written lately to the metastore (``segments.failover.records``) and withdraws
the reports of segments it no longer writes. The control plane's leader judges them.
"""

from __future__ import annotations

import asyncio
import logging

from core.errors import HttpbusError
from core.lifecycle import AsyncResource
from core.tasks import cancel
from segments.failover.health import SegmentKey, WriteHealth
from segments.failover.records import FailoverRecords

log = logging.getLogger(__name__)


class HealthReporter(AsyncResource):
    def __init__(
        self, records: FailoverRecords, health: WriteHealth, member_id: str, interval_s: float
    ) -> None:
        self.records = records
        self.health = health
        self.member_id = member_id
        self.interval_s = interval_s
        self._reported: set[SegmentKey] = set()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def aclose(self) -> None:
        await cancel(self._task)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.report_once()
            except HttpbusError as exc:  # the metastore is away: the next round tries again
                log.warning("reporting write health: %s", exc)

    async def report_once(self) -> None:
        reports = self.health.reports(self.member_id)
        await asyncio.gather(*(self.records.report(r) for r in reports))
        now = {(r.project, r.topic, r.segment) for r in reports}
        for key in self._reported - now:  # idle a while: no report any more
            await self.records.withdraw(key, self.member_id)
        self._reported = now

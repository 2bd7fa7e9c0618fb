"""Failover records in the metastore: producers' health reports and unsealed segments.

- ``/failover/health/{p}:{t}:{segment}:{member}`` (ephemeral): a producer's latest
  :class:`~.health.HealthReport` of a segment, replaced about once a second, gone with the
  producer's session;
- ``/failover/unsealed/{p}:{t}:{segment}``: written in the failover's commit transaction,
  deleted once the leader sealed the segment; the leader finds what it must seal with one read.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict

from core.errors import NotFound
from metastore import paths
from metastore.ephemeral import put_ephemeral, remove
from metastore.protocol import Create, MetaStore

from .health import HealthReport, SegmentKey


class FailoverRecords:
    def __init__(self, store: MetaStore) -> None:
        self.store = store

    async def report(self, report: HealthReport) -> None:
        """Write a producer's report (an ephemeral node per producer and segment)."""
        path = paths.segment_health(report.project, report.topic, report.segment, report.member)
        await put_ephemeral(self.store, path, report.model_dump_json().encode())

    async def withdraw(self, key: SegmentKey, member: str) -> None:
        await remove(self.store, paths.segment_health(*key, member))

    async def reports(self) -> dict[SegmentKey, list[HealthReport]]:
        """Every live producer's reports, per segment."""
        try:
            names = await self.store.children(paths.FAILOVER_HEALTH)
        except NotFound:
            return {}
        parsed = [(n, paths.parse_segment_health(n)) for n in names]
        wanted = [(n, key) for n, key in parsed if key is not None]
        nodes = await asyncio.gather(
            *(self.store.get(f"{paths.FAILOVER_HEALTH}/{n}") for n, _ in wanted)
        )
        out: dict[SegmentKey, list[HealthReport]] = defaultdict(list)
        for (_, key), node in zip(wanted, nodes, strict=True):
            if node is not None and node.data:
                out[(key[0], key[1], key[2])].append(HealthReport.model_validate_json(node.data))
        return dict(out)

    @staticmethod
    def mark_unsealed(key: SegmentKey) -> Create:
        """The op that records ``key`` as left unsealed (part of the commit transaction)."""
        return Create(paths.unsealed_segment(*key), b"")

    async def unsealed(self) -> list[SegmentKey]:
        try:
            names = await self.store.children(paths.FAILOVER_UNSEALED)
        except NotFound:
            return []
        return [key for key in map(paths.parse_unsealed, names) if key is not None]

    async def sealed(self, key: SegmentKey) -> None:
        try:
            await self.store.delete(paths.unsealed_segment(*key))
        except NotFound:
            pass

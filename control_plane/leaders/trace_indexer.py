"""The trace indexer: the audit trail, copied into the trace index (``reports.trace``).

One control plane leads the role ``trace-indexer`` (leader election, like the assigner). The
leader reads every partition of the audit topic from the positions committed under the
group ``httpbus.trace-indexer``, inserts the events in batches (a transaction per round),
and only then commits the positions: a crash re-reads at most one round, and the index
skips events it holds already (each is keyed by its place in the topic). It also deletes
events older than the retention, every ``prune_every_s``.

Events reach the index within about a second of being written to the audit topic when it
keeps up; ``lag`` says how far behind it is.
"""

from __future__ import annotations

import asyncio
import logging
import time

from control_plane.leaders.context import ContextRole, LeaderContext
from core.errors import HttpbusError
from reports.trace import SourcedEvent, TraceIndex
from segments.audit import decode_audit_record
from segments.protocol import SegmentStore, Stored

log = logging.getLogger(__name__)
GROUP = "httpbus.trace-indexer"
ROLE = "trace-indexer"


class TraceIndexer(ContextRole):
    """Indexes ``topic`` of ``store`` into ``index`` while this process leads the role."""

    def __init__(
        self,
        context: LeaderContext,
        store: SegmentStore,
        topic: str,
        index: TraceIndex,
        *,
        retention_s: float,
        records_per_read: int = 200,
        prune_every_s: float = 300.0,
    ) -> None:
        super().__init__(context, ROLE)
        self.store = store
        self.topic = topic
        self.index = index
        self.retention_s = retention_s
        self.records_per_read = records_per_read
        self.prune_every_s = prune_every_s
        self._positions: dict[int, int] = {}

    async def lead(self, lost: asyncio.Event) -> None:
        """Index and prune until the leadership is lost."""
        pruner = asyncio.create_task(self._prune_loop())
        try:
            while not lost.is_set():
                if not await self._start():
                    await _wait(lost, 1.0)  # the audit topic is not there yet
                    continue
                while not lost.is_set():
                    if not await self.round():
                        await _wait(lost, 0.2)
        finally:
            pruner.cancel()
            await asyncio.gather(pruner, return_exceptions=True)

    async def _start(self) -> bool:
        partitions = await self.store.partitions(self.topic)
        if not partitions:
            return False
        committed = await self.store.committed(self.topic, GROUP)
        self._positions = {p: committed.get(p, 0) for p in range(partitions)}
        return True

    async def round(self) -> bool:
        """Read what is new on every partition, index it, commit; whether anything was."""
        events: list[SourcedEvent] = []
        moved: dict[int, int] = {}
        for partition, position in self._positions.items():
            records = await self.store.read(
                self.topic, partition, position, max_records=self.records_per_read, timeout=0.05
            )
            events += _sourced(partition, records)
            if records:
                moved[partition] = records[-1].position + 1
        if not moved:
            return False
        await asyncio.to_thread(self.index.insert, events)
        await self.store.commit(self.topic, GROUP, {**self._positions, **moved})
        self._positions.update(moved)
        return True

    async def _prune_loop(self) -> None:
        while True:
            try:
                before = int((time.time() - self.retention_s) * 1000)
                pruned = await asyncio.to_thread(self.index.prune, before)
                if pruned:
                    log.info("trace index: %d events past the retention deleted", pruned)
            except HttpbusError as exc:
                log.warning("trace index: pruning failed: %s", exc)
            await asyncio.sleep(self.prune_every_s)


def _sourced(partition: int, records: list[Stored]) -> list[SourcedEvent]:
    found = []
    for record in records:
        try:
            events = decode_audit_record(record.value)
        except ValueError as exc:  # a record we cannot read: skip it, say so
            log.warning(
                "trace index: audit record %d:%d unreadable: %s", partition, record.position, exc
            )
            continue
        for i, event in enumerate(events):
            found.append(SourcedEvent(f"{partition}:{record.position}:{i}", event))
    return found


async def _wait(event: asyncio.Event, seconds: float) -> None:
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        pass

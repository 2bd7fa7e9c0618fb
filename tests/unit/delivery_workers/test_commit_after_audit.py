"""A worker commits a position only once the audit events of the messages below it are
durable (issue 18, item 3): while the audit topic cannot be written the runner delivers but
commits nothing, so a crash then makes the next owner deliver again rather than leave a
committed message without its events (which the audit would report lost)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from core.audit import AuditType
from delivery_workers.tracking import CommitPolicy
from segments.audit import AuditSink, decode_audit_record
from segments.protocol import Produced, Record, SegmentStore
from segments.reader import commit_group
from tests.support.until import until
from tests.support.world import embedded_world, produce, start_runner, stop_runner, subscribe

AUDIT = "__httpbus.audit"
COUNT = 20


class StuckStore:
    """The embedded store, except that audit writes wait until ``open`` is set."""

    def __init__(self, inner: SegmentStore) -> None:
        self.inner = inner
        self.open = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        await self.open.wait()
        result: list[Produced | Exception] = await self.inner.produce_many(name, records)
        return result


async def test_nothing_is_committed_before_its_audit_events_are_durable(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="delivery_workers.commit")
    async with embedded_world(tmp_path, partitions=2, grouped=False) as world:
        sub = await subscribe(world)
        for i in range(COUNT):
            await produce(world, f"m{i}", None)
        stuck = StuckStore(world.store)
        sink = AuditSink(stuck, AUDIT, flush_interval_s=0.05, durable_timeout_s=0.2)  # type: ignore[arg-type]
        async with sink:
            policy = CommitPolicy(every_n=5, every_s=0.1)
            _, task, sender = await start_runner(world, sub, policy, audit=sink)
            try:
                await until(lambda: len(set(world.hook.delivered())) >= COUNT, 10, "delivered")
                await until(lambda: "held back" in caplog.text, 10, "a commit held back")
                group = commit_group(sub)
                assert sum((await world.store.committed(world.storage, group)).values()) == 0
                stuck.open.set()  # the audit topic is back

                async def committed() -> bool:
                    found = await world.store.committed(world.storage, group)
                    return sum(found.values()) == COUNT

                await until(committed, 10, "all committed once the events are written")
            finally:
                await stop_runner(task, sender)
        delivered = await _delivered_events(world.store)
    assert delivered >= {f"m{i}" for i in range(COUNT)}


async def _delivered_events(store: SegmentStore) -> set[str]:
    found: set[str] = set()
    for partition, end in (await store.end_positions(AUDIT)).items():
        for record in await store.read(AUDIT, partition, 0, max_records=end, timeout=2):
            for event in decode_audit_record(record.value):
                if event.type is AuditType.DELIVERED:
                    found.add(event.message_id)
    return found

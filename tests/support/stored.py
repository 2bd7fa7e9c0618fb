"""Reading back what a segment store holds, for tests that check every record."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.errors import StorageUnavailable
from segments.protocol import SegmentStore, Stored

T = TypeVar("T")


async def read_to_end(
    store: SegmentStore,
    topic: str,
    *,
    expected: int | None = None,
    until: Callable[[list[Stored]], bool] | None = None,
    deadline_s: float = 60.0,
    max_records: int = 1_000,
    timeout: float = 2.0,
) -> list[Stored]:
    """Every record of ``topic``, each partition in stored order, read up to the end
    positions the store gives now, against a deadline: an empty read is retried, never
    taken for the end (a consumer's first fetch can come back empty under load; one empty
    5 s read ending a partition once made 300 stored messages read as 298). ``expected``:
    how many are known to be stored; reaching it ends the read too, as Pulsar's positions
    are not dense (the last record may sit below the end position). ``until``: given what
    was read so far, whether that is all (every acknowledged id found: a count cannot say,
    once retries stored duplicates). Past ``deadline_s`` it fails, naming each partition
    short of its end."""
    deadline = time.monotonic() + deadline_s
    ends = await _retried(lambda: store.end_positions(topic), deadline)
    got: dict[int, list[Stored]] = {p: [] for p in ends}
    nexts = dict.fromkeys(ends, 0)
    while True:
        short = {p: (nexts[p], end) for p, end in ends.items() if nexts[p] < end}
        total = sum(len(records) for records in got.values())
        read = [m for p in sorted(got) for m in got[p]]
        if not short or (expected is not None and total >= expected) or (until and until(read)):
            return read
        assert time.monotonic() < deadline, (
            f"{topic}: read {total} (expected {expected}) in {deadline_s} s; "
            f"partitions short of their end (next, end): {short}"
        )
        for p, (start, _) in short.items():
            batch = await _retried(
                lambda: store.read(topic, p, start, max_records=max_records, timeout=timeout),  # noqa: B023
                deadline,
            )
            if batch:
                got[p] += batch
                nexts[p] = batch[-1].position + 1


async def _retried(call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """``call()``, again while the storage is unavailable (a broker just restarted: stale
    metadata, a leader epoch moving on) until ``deadline``."""
    while True:
        try:
            return await call()
        except StorageUnavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)  # a retry's pace

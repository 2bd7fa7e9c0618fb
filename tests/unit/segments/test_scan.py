"""A scan reads a partition to its end without taking an empty read for the end: a read that
comes back empty under load (a slow fetch) is read again while the store says it holds more,
a gap at the end (positions not dense, as on Pulsar) ends it at once, and a store that never
gives what it says it holds is an error, not part of the partition as if it were all."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.errors import StorageUnavailable
from segments.embedded import EmbeddedSegmentStore, EmbeddedSettings
from segments.protocol import Record, SegmentStore, Stored
from segments.scan import read_range
from segments.subscription import dlq

NAME = "dlq.t"


class Flaky:
    """The store, but a read gives one message at most, and ``misses`` reads past the first
    message come back empty after their timeout; ``gap`` moves every position and end that
    far apart (positions not dense); ``lost`` hides messages past the first (never read)."""

    def __init__(self, inner: SegmentStore, misses: int = 0, gap: int = 1, lost: bool = False):
        self.inner, self.misses, self.gap, self.lost = inner, misses, gap, lost

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, name: str, partition: int, start: int, **kw: Any) -> list[Stored]:
        inner_start = -(-start // self.gap)
        if inner_start > 0 and (self.misses > 0 or self.lost):
            self.misses -= 1
            await asyncio.sleep(kw.get("timeout", 1.0))
            return []
        got = (await self.inner.read(name, partition, inner_start, **kw))[:1]
        return [Stored(m.partition, m.position * self.gap, m.timestamp_ms, m.value) for m in got]

    async def end_positions(self, name: str) -> dict[int, int]:
        return {p: e * self.gap for p, e in (await self.inner.end_positions(name)).items()}

    async def last_positions(self, name: str) -> dict[int, int]:
        return {p: x * self.gap for p, x in (await self.inner.last_positions(name)).items()}


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SegmentStore]:
    async with EmbeddedSegmentStore(EmbeddedSettings(path=tmp_path / "s.db")) as opened:
        await opened.create_topic(NAME, 1, retention_ms=0)
        for i in range(5):
            await opened.produce(NAME, Record(b"%d" % i), partition=0)
        yield opened


async def test_empty_reads_short_of_the_last_message_are_read_again(store: SegmentStore) -> None:
    flaky = Flaky(store, misses=3)
    back = await dlq.read_all(flaky, NAME)
    assert [m.value for m in back] == [b"0", b"1", b"2", b"3", b"4"]  # before: [b"0"]


async def test_a_gap_at_the_end_ends_the_scan_at_once(store: SegmentStore) -> None:
    sparse = Flaky(store, gap=10)
    t0 = time.monotonic()
    back = await dlq.read_all(sparse, NAME)
    assert [m.position for m in back] == [0, 10, 20, 30, 40]
    assert time.monotonic() - t0 < 3  # one empty read past 40 (0.5 s), then the last says done


async def test_what_the_store_holds_but_never_gives_is_an_error(store: SegmentStore) -> None:
    lost = Flaky(store, lost=True)
    batches = read_range(lost, NAME, 0, 0, 5, timeout=0.1, patience_s=0.5)
    with pytest.raises(StorageUnavailable, match=r"read to position 1, but the store holds"):
        async for _ in batches:
            pass

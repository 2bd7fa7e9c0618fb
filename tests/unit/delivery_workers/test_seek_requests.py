"""A worker follows the seek requests with one watch of ``/seeks`` for all its units, not
a watch per unit (at 10^5 units that was 10^5 ZooKeeper watches per member set, and ~4
requests per unit at every start: bench/scale.py); each unit still steps aside for its
own request and waits for it to go."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

from delivery_workers.seeks import SeekRequests
from metastore import paths
from metastore.embedded import EmbeddedMetaStore


class CountingStore(EmbeddedMetaStore):
    """Counts the watches made, by path."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.watched: list[str] = []

    def watch(self, path: str) -> AsyncIterator[object]:  # type: ignore[override]
        self.watched.append(path)
        return super().watch(path)

    def watch_children(self, path: str) -> AsyncIterator[list[str]]:
        self.watched.append(path)
        return super().watch_children(path)


async def test_units_wait_for_their_own_request_on_one_watch(tmp_path: Path) -> None:
    async with CountingStore(str(tmp_path / "m.db")) as meta:
        seeks = SeekRequests(meta)
        await seeks.start()
        try:
            one, two = paths.seek_request("shop", "s1"), paths.seek_request("shop", "s2")
            async with asyncio.timeout(5):  # no request: at once
                await seeks.until(one, present=False)
                await seeks.until(two, present=False)
            stepping_aside = [asyncio.create_task(seeks.until(p, present=True)) for p in (one, two)]
            await meta.create(one, b"{}", ephemeral=True)
            async with asyncio.timeout(5):
                await stepping_aside[0]
            await asyncio.sleep(0.2)  # proves that another unit's request is not its own
            assert not stepping_aside[1].done()
            back = asyncio.create_task(seeks.until(one, present=False))
            await asyncio.sleep(0.1)
            assert not back.done()
            await meta.delete(one)
            async with asyncio.timeout(5):
                await back
            stepping_aside[1].cancel()
            assert meta.watched == [paths.SEEKS]  # one watch, whatever the units
        finally:
            await seeks.aclose()


async def test_a_unit_asking_before_the_first_read_waits_for_it(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        await meta.create(paths.seek_request("shop", "s1"), b"{}", ephemeral=True)
        seeks = SeekRequests(meta)
        await seeks.start()
        try:
            async with asyncio.timeout(5):  # the request was there before the worker
                await seeks.until(paths.seek_request("shop", "s1"), present=True)
                await seeks.until(paths.seek_request("shop", "s2"), present=False)
        finally:
            await seeks.aclose()

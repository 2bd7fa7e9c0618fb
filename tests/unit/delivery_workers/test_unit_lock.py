"""``UnitLock``: a lapsed lease fences a held lock (it is not watched), a failed read of a
fenced lock is not a lost lock, and a revoked process takes no lock."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from core.errors import MetaStoreUnavailable
from core.tasks import TaskSet
from delivery_workers.unit_lock import UnitLock
from metastore.embedded import EmbeddedMetaStore
from metastore.protocol import Node


class _Dropping:
    """The store, whose next ``fails`` reads fail as on a connection dropped again."""

    def __init__(self, inner: EmbeddedMetaStore, fails: int) -> None:
        self.inner, self.fails = inner, fails

    async def get(self, path: str) -> Node | None:
        if self.fails:
            self.fails -= 1
            raise MetaStoreUnavailable("zookeeper failed on the lock: ConnectionLoss")
        return await self.inner.get(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_a_fenced_lock_read_that_fails_is_read_again(tmp_path: Path) -> None:
    """Between peers of a splitting ensemble the read after a reconnect failed; raising it
    made the worker take the lock anew (a new token) and redeliver (a chaos run in CI)."""
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as inner:
        lock = UnitLock(inner, "w1", "/locks/s0", TaskSet(), 0.05)
        await lock.acquire()
        lock.metastore = _Dropping(inner, fails=2)  # type: ignore[assignment]
        assert await lock.until_ours_again()
        assert lock.metastore.fails == 0  # type: ignore[attr-defined]


async def test_a_held_lock_is_fenced_when_the_lease_lapses(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as store:
        lock = UnitLock(store, "w1", "/locks/s0", TaskSet(), 0.05)
        await lock.acquire()
        fenced = asyncio.ensure_future(lock.until_fenced())
        await asyncio.sleep(0.05)
        assert not fenced.done()
        store.lease.suspend()  # as a lost session does
        await asyncio.wait_for(fenced, 2)
        assert await lock.until_ours_again()  # the same session: still ours


async def test_a_revoked_process_takes_no_lock(tmp_path: Path) -> None:
    """Its member id is another live process's, which takes and clears locks by that id."""
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as store:
        store.lease.revoke("member w1 is held by another live process")
        lock = UnitLock(store, "w1", "/locks/s0", TaskSet(), 0.05)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                await lock.acquire()
        assert await store.get("/locks/s0") is None

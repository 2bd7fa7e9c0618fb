"""``UnitLock.until_ours_again``: a failed read of a fenced lock is not a lost lock."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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

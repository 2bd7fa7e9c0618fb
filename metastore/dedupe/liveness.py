"""Whether the owner of a pending claim is a live producer: the metastore's membership read
at most once per interval, never per message (ZooKeeper carries no per-message work)."""

from __future__ import annotations

import time
from collections.abc import Callable

from metastore import paths
from metastore.protocol import MetaStore

from .protocol import PRODUCERS


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class Members:
    """The names of the live members of ``group``, read from ``meta`` when older than
    ``ttl_s``. Asked about a name that is absent, it reads again unless its list was read
    ``skew_ms`` after the claim was made: a producer joins before it serves, so one that
    claimed at ``at_ms`` and is missing from a list read later has gone."""

    def __init__(
        self,
        meta: MetaStore,
        group: str = PRODUCERS,
        *,
        ttl_s: float = 1.0,
        skew_ms: int = 2_000,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.meta = meta
        self.group = group
        self.ttl_ms = int(ttl_s * 1000)
        self.skew_ms = skew_ms
        self.clock_ms = clock_ms
        self._names: frozenset[str] = frozenset()
        self._read_at_ms: int | None = None

    async def alive(self, member: str, claimed_at_ms: int) -> bool:
        now = self.clock_ms()
        fresh = self._read_at_ms is not None and now - self._read_at_ms < self.ttl_ms
        if fresh and member in self._names:
            return True
        if self._read_at_ms is None or not fresh:
            await self.refresh()
        elif self._read_at_ms < claimed_at_ms + self.skew_ms:  # it may have joined since
            if now - self._read_at_ms < 50:
                return True  # read again at most every 50 ms: till then, wait for it
            await self.refresh()
        return member in self._names

    async def refresh(self) -> None:
        read_at = self.clock_ms()
        self._names = frozenset(await self.meta.children(paths.members(self.group)))
        self._read_at_ms = read_at

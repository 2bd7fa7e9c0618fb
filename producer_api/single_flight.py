"""One load per key at a time: the producer's caches read a topic or a project's quota on
first use, and however many requests ask for it meanwhile, they all await that one read.

    loads = SingleFlight(self._load)
    topic = await loads.get(("shop", "orders"))  # concurrent callers share one _load
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SingleFlight(Generic[K, V]):
    """Runs ``load(key)`` once for the callers of ``get(key)`` that overlap; a caller that
    is cancelled does not cancel the load the others await (it is shielded). Once the load
    is done the next ``get`` starts a new one: caching the value is the caller's business."""

    def __init__(self, load: Callable[[K], Coroutine[Any, Any, V]]) -> None:
        self._load = load
        self._pending: dict[K, asyncio.Future[V]] = {}

    async def get(self, key: K) -> V:
        pending = self._pending.get(key)
        if pending is None:
            pending = asyncio.ensure_future(self._load(key))
            self._pending[key] = pending
            pending.add_done_callback(lambda _: self._pending.pop(key, None))
        return await asyncio.shield(pending)

"""The seek requests in force, as one worker sees them: one watch of ``/seeks`` per worker.

While a seek request ``/seeks/{project}:{s}`` exists the control plane is moving the
subscription's positions, and no worker runs it (worker.py). Each held unit used to watch
its own request node: a read and a ZooKeeper watch per unit and per member, ~4 requests per
unit at every (re)start, 10^5 watches at 10^5 units (bench/scale.py). A request is short-lived
and rare, so the worker now watches the children of ``/seeks`` once and every unit waits on
that set. Waiters are kept by request name: a change wakes only the units it concerns.

The set can lag the store by a watch's round trip, as one node's watch could: a unit's
safety never rests on it. A unit runs only while it holds its lock, and the control plane
takes the lock (after the worker steps aside) before it moves anything.

Example::

    seeks = SeekRequests(meta)
    await seeks.start()
    await seeks.until(paths.seek_request("shop", "s0"), present=False)
"""

from __future__ import annotations

import asyncio
import logging

from core.lifecycle import AsyncResource
from core.tasks import cancel
from metastore import paths
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)

_RETRY_S = 1.0  # after the watch failed other than by the store being away (a bug)


class SeekRequests(AsyncResource):
    """See the module doc."""

    def __init__(self, metastore: MetaStore) -> None:
        self.metastore = metastore
        self._names: set[str] | None = None  # None until the first read
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._first: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._first = asyncio.get_running_loop().create_future()
        self._task = asyncio.create_task(self._follow(), name="seek-requests")

    async def aclose(self) -> None:
        await cancel(self._task)
        self._task = None

    async def until(self, request: str, *, present: bool) -> None:
        """Return once the seek request at ``request`` (``paths.seek_request``) exists
        (``present``) or does not."""
        name = request.rsplit("/", 1)[1]
        while True:
            if self._names is not None and (name in self._names) == present:
                return
            waiter = asyncio.get_running_loop().create_future()
            waiting = self._waiters.setdefault(name, set())
            waiting.add(waiter)
            try:
                if self._names is None and self._first is not None:
                    await asyncio.wait([waiter, self._first], return_when=asyncio.FIRST_COMPLETED)
                else:
                    await waiter
            finally:
                waiting.discard(waiter)
                if not waiting:
                    self._waiters.pop(name, None)

    async def _follow(self) -> None:
        while True:
            try:
                async for names in self.metastore.watch_children(paths.SEEKS):
                    self._seen(set(names))
                return  # the store closed
            except Exception:  # a bug: the units waiting on the set must not hang
                log.exception("seek requests not followed; retrying")
                await asyncio.sleep(_RETRY_S)

    def _seen(self, names: set[str]) -> None:
        before, self._names = self._names, names
        if self._first is not None and not self._first.done():
            self._first.set_result(None)
        changed = set(self._waiters) if before is None else before ^ names
        for name in changed & self._waiters.keys():
            for waiter in self._waiters[name]:
                if not waiter.done():
                    waiter.set_result(None)

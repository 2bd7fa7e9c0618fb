"""Leader election on an ephemeral metastore node, for roles that need one leader.

The process that creates ``/leader/{role}`` leads; the others watch the node and stand
again when it vanishes (its owner closed, or its session expired). A subclass implements
:meth:`LeaderElection.lead`, which runs while this process leads and must return once
``lost`` is set. Every elected role of the control plane is such a subclass, one a module
of this package, each elected on its own; :func:`control_plane.leaders.roles.roles` lists
them.

A leader is fenced like a lock holder (metastore/lease.py): it leads only while its
metastore session's lease is valid, so one cut off from ZooKeeper steps down (``lost``)
before the server can expire its session and another process be elected, and stands again
only once the lease is valid (the session confirmed, or a new one). A ``lead`` that has not
returned when ``lost`` is set is cancelled: a round blocked on a metastore call, which fails
only at the connection's timeout, must not outlast the lease. Without this, a role whose
rounds swallow the metastore's errors led on through a partition, beside the process
elected in its place, until after the heal (docs/reliability.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from core.errors import AlreadyExists, HttpbusError
from core.lifecycle import AsyncResource
from core.tasks import cancel, cancel_all, stop_if_cancelled
from metastore import paths
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)


async def rest(lost: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds`` between a leader's rounds, or less if the leadership is ``lost``."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await lost.wait()


async def every(
    lost: asyncio.Event, seconds: float, one_round: Callable[[], Awaitable[object]], what: str
) -> None:
    """Run ``one_round`` every ``seconds`` until the leadership is ``lost``. An httpbus error
    ends only its round: it is logged as ``what``, and the next round tries again."""
    while not lost.is_set():
        try:
            await one_round()
        except HttpbusError as exc:
            stop_if_cancelled(exc)
            log.warning("%s: %s", what, exc)
        await rest(lost, seconds)


_RETRY_S = 1.0


class LeaderElection(AsyncResource):
    """Stand for election in the background; :meth:`lead` while elected."""

    def __init__(self, metastore: MetaStore, role: str, member_id: str) -> None:
        self.metastore = metastore
        self.role = role
        self.member_id = member_id
        self.is_leader = False
        self._path = paths.leader(role)
        self._identity = json.dumps({"member": member_id}).encode()
        self._task: asyncio.Task[None] | None = None

    async def lead(self, lost: asyncio.Event) -> None:
        raise NotImplementedError

    def figures(self) -> dict[str, Any]:
        """What ``/metrics`` reports of this role besides whether it leads (by name, e.g.
        ``cutovers_active``); nothing unless a role says."""
        return {}

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"{self.role}-{self.member_id}")

    async def aclose(self) -> None:
        """Stop; a leader gives up its node so another process takes over at once."""
        await cancel(self._task)
        self._task = None
        if self.is_leader:
            self.is_leader = False
            with contextlib.suppress(HttpbusError):
                node = await self.metastore.get(self._path)
                if node is not None and node.data == self._identity:
                    await self.metastore.delete(self._path, expected_version=node.version)

    async def _run(self) -> None:
        while True:
            try:
                await self.metastore.lease.until_valid()
                await self._elect()
                log.info("%s leads %s", self.member_id, self.role)
                lost = asyncio.Event()
                watcher = asyncio.create_task(self._watch_leadership(lost))
                leading = asyncio.create_task(self.lead(lost))
                try:
                    await asyncio.wait([leading, watcher], return_when=asyncio.FIRST_COMPLETED)
                    if leading.done():
                        leading.result()
                    # Lost: a round still waiting on the metastore (up to its request
                    # timeout while cut off) is cancelled, not waited for.
                finally:
                    await cancel(leading)
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)
            except HttpbusError as exc:
                stop_if_cancelled(exc)  # stepped down: the error is its clean-up's
                log.warning("%s %s: %s; retrying", self.role, self.member_id, exc)
                await asyncio.sleep(_RETRY_S)
            finally:
                self.is_leader = False

    async def _elect(self) -> None:
        while True:
            try:
                await self.metastore.create(self._path, self._identity, ephemeral=True)
                self.is_leader = True
                return
            except AlreadyExists:
                pass
            async for node in self.metastore.watch(self._path):
                if node is None:
                    break
                if node.data == self._identity:
                    self.is_leader = True
                    return

    async def _watch_leadership(self, lost: asyncio.Event) -> None:
        """Set ``lost`` once the node is gone or another's, or the session's lease lapses."""
        gone = asyncio.create_task(self._node_gone())
        lapsed = asyncio.create_task(self.metastore.lease.until_lapsed())
        try:
            done, _ = await asyncio.wait({gone, lapsed}, return_when=asyncio.FIRST_COMPLETED)
            if lapsed in done:
                log.warning(
                    "%s steps down from %s: its metastore session is not confirmed",
                    self.member_id,
                    self.role,
                )
        finally:
            lost.set()
            await cancel_all([gone, lapsed])

    async def _node_gone(self) -> None:
        async for node in self.metastore.watch(self._path):
            if node is None or node.data != self._identity:
                log.warning("%s lost the %s leadership", self.member_id, self.role)
                return

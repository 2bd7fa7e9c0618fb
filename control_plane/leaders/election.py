"""Leader election on an ephemeral metastore node, for roles that need one leader.

The process that creates ``/leader/{role}`` leads; the others watch the node and stand
again when it vanishes (its owner closed, or its session expired). A subclass implements
:meth:`LeaderElection.lead`, which runs while this process leads and must return once
``lost`` is set. Every elected role of the control plane is such a subclass, one a module
of this package, each elected on its own; :func:`control_plane.leaders.roles.roles` lists
them.
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
from core.tasks import cancel, stop_if_cancelled
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
                await self._elect()
                log.info("%s leads %s", self.member_id, self.role)
                lost = asyncio.Event()
                watcher = asyncio.create_task(self._watch_leadership(lost))
                try:
                    await self.lead(lost)
                finally:
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
        async for node in self.metastore.watch(self._path):
            if node is None or node.data != self._identity:
                log.warning("%s lost the %s leadership", self.member_id, self.role)
                lost.set()
                return

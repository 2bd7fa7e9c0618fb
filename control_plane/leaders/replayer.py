"""The replayer: carries out the window replays operators ask for, one after the other.

The process elected to the role ``replayer`` looks for open replays
(``/replays/{p}:{s}``, :mod:`control_plane.services.replays`) every ``interval_s`` and runs
each to its end; a replay that fails (its subscription deleted, storage or the archive
unreachable) is recorded ``failed`` with the reason, and may be asked again. A new leader
takes a running replay up where the record says it got to.
"""

from __future__ import annotations

import asyncio
import logging
import time

from control_plane.leaders.context import ContextRole, LeaderContext
from control_plane.leaders.election import every
from control_plane.services import replays
from control_plane.services.operations import SubscriptionOps
from core.archive import ArchiveStorage
from core.errors import HttpbusError

log = logging.getLogger(__name__)
ROLE = "replayer"


class Replayer(ContextRole):
    """Run open window replays while this process leads the role."""

    def __init__(
        self,
        context: LeaderContext,
        storage: ArchiveStorage,
        *,
        interval_s: float = 1.0,
    ) -> None:
        super().__init__(context, ROLE)
        self.storage = storage
        self.interval_s = interval_s

    async def lead(self, lost: asyncio.Event) -> None:
        ops = SubscriptionOps(self.catalog, dict(self.stores), self.member_id)

        async def one_round() -> None:
            for replay in await replays.open_replays(self.metastore):
                await self._replay(ops, replay)

        await every(lost, self.interval_s, one_round, "replays")

    async def _replay(self, ops: SubscriptionOps, replay: replays.Replay) -> None:
        try:
            await replays.run_replay(self.catalog, self.stores, self.storage, ops, replay)
        except HttpbusError as exc:
            log.warning(
                "replay %s of %s/%s failed: %s", replay.id, replay.project, replay.subscription, exc
            )
            replay.state, replay.error = "failed", str(exc)
            replay.finished_ms = int(time.time() * 1000)
            await replays.save(self.metastore, replay)

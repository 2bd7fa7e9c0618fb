"""The archiver: every topic with an ``archive`` setting gets its closed windows written.

The process elected to the role ``archiver`` runs a round when it takes the lead and every
``archive.interval_s`` after: for each topic whose setting names an archive, it writes the
windows that have closed since the last round (:func:`control_plane.services.archive.
archive_topic`) and deletes those past ``keep_days``. The state of each archive lies beside
its files, so a new leader carries on where the last one stopped. The clock is injected (the
tests run hours of simulated time without waiting).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from control_plane.leaders.context import ContextRole, LeaderContext
from control_plane.leaders.election import every
from control_plane.services.archive import Round, archive_topic
from control_plane.services.archive_objects import open_objects
from core.archive import ArchiveStorage
from core.errors import HttpbusError

log = logging.getLogger(__name__)
ROLE = "archiver"


def wall_ms() -> int:
    return int(time.time() * 1000)


class Archiver(ContextRole):
    """Archive every archived topic's closed windows while this process leads the role."""

    def __init__(
        self,
        context: LeaderContext,
        storage: ArchiveStorage,
        *,
        now_ms: Callable[[], int] = wall_ms,
    ) -> None:
        super().__init__(context, ROLE)
        self.storage = storage
        self.now_ms = now_ms
        self.windows_written = 0
        self.rounds = 0

    async def lead(self, lost: asyncio.Event) -> None:
        await every(lost, self.storage.interval_s, self.round, "archiving")

    async def round(self) -> dict[tuple[str, str], Round]:
        """One pass over every topic; a topic's trouble is logged and does not stop the rest."""
        done: dict[tuple[str, str], Round] = {}
        for project in await self.catalog.list_projects():
            for name in await self.catalog.list_topics(project):
                try:
                    topic = await self.catalog.get_topic(project, name)
                    if topic.archive is None:
                        continue
                    objects = open_objects(self.storage, topic.archive.to)
                    grace_ms = int(self.storage.grace_s * 1000)
                    done[(project, name)] = result = await archive_topic(
                        topic, topic.archive, objects, self.stores, self.now_ms(), grace_ms
                    )
                    self.windows_written += len(result.written)
                except HttpbusError as exc:
                    log.warning("archiving %s/%s: %s", project, name, exc)
        self.rounds += 1
        return done

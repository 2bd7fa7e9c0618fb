"""Where a topic's verified migration lives in the metastore (:mod:`core.migration`).

One document per topic, ``/projects/{p}/topics/{t}/migration``: the topic's latest migration,
written by compare-and-set only. Its shadow segment is created with it, in one transaction
checked against the topic's produce pointer and node (rewritten unchanged, so a cutover that
read the topic before cannot start after), so a migration never exists without its segment
nor begins while a cutover moves the pointer. Ending the dual write (abandon) retires the
segment and rewrites the topic's node unchanged in the same transaction: the node's new
version wakes every producer's watch of the topic, so none keeps writing the shadow segment.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from core.errors import AlreadyExists, MigrationInProgress, NotFound, VersionConflict
from core.migration import Migration, MigrationWindow, merge_windows
from core.model import Segment, Topic

from . import paths
from .documents import TopicDocuments
from .protocol import Check, Create, MetaStore, Op, Update

_CAS_RETRIES = 20


class MigrationRecords(TopicDocuments[Migration]):
    """Typed access to the migration documents on a ``MetaStore``."""

    def __init__(self, store: MetaStore) -> None:
        super().__init__(store, Migration, paths.migration)

    async def create(self, migration: Migration, shadow: Segment, topic: Topic) -> None:
        """Store ``migration`` with its ``shadow`` segment, if ``topic``'s produce pointer is
        still at the version it was read at; ``MigrationInProgress`` if one is under way."""
        p, t = migration.project, migration.topic
        current = await self.get(p, t)
        if current is not None and not current[0].finished:
            raise MigrationInProgress(
                f"topic {p}/{t} is in migration {current[0].id} ({current[0].state}); "
                "abandon it first"
            )
        if topic.produce_pointer is None:
            raise NotFound(f"topic {p}/{t} has no active segment")
        doc = self.write_op(p, t, migration, None if current is None else current[1])
        node = await self.store.get(paths.topic(p, t))
        if node is None:
            raise NotFound(f"topic {p}/{t} does not exist")
        ops: list[Op] = [
            Check(paths.produce_pointer(p, t), topic.produce_pointer.version),
            # Rewritten as it is: a cutover started meanwhile (checked against the topic's
            # version) fails, and so does this if the topic changed since it was read.
            Update(paths.topic(p, t), node.data, topic.version),
            Create(paths.segment(p, t, shadow.id), shadow.model_dump_json().encode()),
            doc,
        ]
        if await self.store.get(paths.active_migration(p, t)) is None:
            ops.append(Create(paths.active_migration(p, t), b""))
        try:
            await self.store.transaction(ops)
        except (AlreadyExists, VersionConflict):
            raise MigrationInProgress(f"topic {p}/{t} changed meanwhile; retry") from None

    async def put(self, migration: Migration, version: int) -> int:
        """Replace the document if it is still at ``version``; the new version."""
        return await self.replace(migration.project, migration.topic, migration, version)

    async def end_dual_write(self, migration: Migration, version: int, shadow: Segment) -> None:
        """In one transaction: the document at ``migration`` (if still at ``version``), the
        shadow segment's record replaced by ``shadow`` and the topic's node rewritten as it is
        (its version moves: producers' watches reload the topic and stop writing it)."""
        p, t = migration.project, migration.topic
        topic_node = await self.store.get(paths.topic(p, t))
        segment_node = await self.store.get(paths.segment(p, t, shadow.id))
        if topic_node is None or segment_node is None:
            raise NotFound(f"topic {p}/{t} or its segment {shadow.id} is gone")
        await self.store.transaction(
            [
                self.write_op(p, t, migration, version),
                Update(
                    paths.segment(p, t, shadow.id),
                    shadow.model_dump_json().encode(),
                    segment_node.version,
                ),
                Update(paths.topic(p, t), topic_node.data, topic_node.version),
            ]
        )
        await self.finish(p, t)

    async def change(self, project: str, topic: str, changes: dict[str, Any]) -> Migration:
        """The migration with ``changes`` applied to it as it is now (a compare-and-set,
        retried on a conflict: the check stores windows on the same document)."""
        for _ in range(_CAS_RETRIES):
            found = await self.get(project, topic)
            if found is None:
                raise NotFound(f"topic {project}/{topic} has had no migration")
            changed = Migration.model_validate({**found[0].model_dump(), **changes})
            with contextlib.suppress(VersionConflict):
                await self.put(changed, found[1])
                return changed
        raise VersionConflict(f"migration of {project}/{topic} keeps changing; try again")

    async def active(self) -> list[tuple[str, str]]:
        """``(project, topic)`` of every migration the leader still drives."""
        names = await self.store.children(paths.ACTIVE_MIGRATIONS)
        return [(n.split(":", 1)[0], n.split(":", 1)[1]) for n in names]

    async def finish(self, project: str, topic: str) -> None:
        """Unmark a migration that needs nothing more."""
        with contextlib.suppress(NotFound):
            await self.store.delete(paths.active_migration(project, topic))

    async def record_check(
        self,
        project: str,
        topic: str,
        windows: Sequence[MigrationWindow],
        now: Callable[[], datetime],
        *,
        rerun: bool = False,
    ) -> Migration:
        """Store a check round's windows (:func:`core.migration.merge_windows`), retried on
        a conflict; a finished migration is returned unchanged."""
        for _ in range(_CAS_RETRIES):
            found = await self.get(project, topic)
            if found is None:
                raise NotFound(f"topic {project}/{topic} has had no migration")
            migration, version = found
            if migration.finished:
                return migration
            merged = merge_windows(migration.windows, windows, rerun=rerun)
            at = now()
            checked = migration.model_copy(
                update={"windows": merged, "checked_at": at, "updated_at": at}
            )
            with contextlib.suppress(VersionConflict):
                await self.put(checked, version)
                return checked
        raise VersionConflict(f"migration of {project}/{topic} keeps changing; try again")

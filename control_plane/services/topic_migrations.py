"""Verified migrations (core.migration): start, read and abandon them.

Any control plane serves these; each is a compare-and-set on the topic's migration document
(:mod:`metastore.migrations`). Starting one creates the shadow segment's storage topic on the
target cluster first, then, in one transaction, its PENDING ``dual_write`` segment record and
the document: producers write the shadow segment from the moment they see the record.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from control_plane.services.admin import drop_storage
from control_plane.services.cutovers import Cutovers, recorded
from control_plane.services.inputs import MigrationStart
from core.errors import (
    CutoverInProgress,
    MigrationInProgress,
    NotFound,
    ValidationFailed,
    VersionConflict,
)
from core.migration import Migration, MigrationState, MigrationWindow
from core.model import Backend, Segment, Topic, utcnow, window_seconds
from metastore.migrations import MigrationRecords
from segments.config import ClusterConfig, is_read_only
from segments.cutover.machine import TERMINAL
from segments.protocol import SegmentStore

log = logging.getLogger(__name__)
_CAS_RETRIES = 20


def _invalid(field: str, problem: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field}: {problem}", details={"fields": [{"field": field, "problem": problem}]}
    )


class Migrations:
    """The topics' verified migrations (see the module doc)."""

    def __init__(
        self,
        cutovers: Cutovers,
        stores: Mapping[str, SegmentStore],
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.cutovers = cutovers
        self.catalog = cutovers.catalog
        self.clusters: Mapping[str, ClusterConfig] = cutovers.clusters
        self.stores = stores
        self.records = MigrationRecords(cutovers.metastore)
        self.now = now

    async def start(self, project: str, topic: str, body: MigrationStart) -> Migration:
        """Begin the dual write of ``project/topic`` onto a shadow segment on
        ``body.cluster``; 422 naming what to fix, 409 while a cutover or migration runs."""
        self._check_target(body.cluster)
        found = await self.catalog.get_topic(project, topic)
        external = self._external(found)
        await self._quiet(found)
        segment_id, storage = await self.cutovers.next_segment(found)
        shadow = Segment(
            id=segment_id,
            cluster=body.cluster,
            backend=Backend(self.clusters[body.cluster].backend),
            storage_topic=storage,
            partitions=body.partitions or external.partitions,
            opened_by="verified migration: the dual-write (shadow) segment",
            dual_write=True,
        )
        legacy_start = await self._store(external.cluster).end_positions(external.storage_topic)
        migration = Migration(
            id=uuid.uuid4().hex[:12],
            project=project,
            topic=topic,
            cluster=body.cluster,
            partitions=shadow.partitions,
            window_s=window_seconds(body.window),
            session_gap_s=window_seconds(body.session_gap),
            clean_windows=body.clean_windows,
            guard_s=window_seconds(body.guard),
            external_segment=external.id,
            shadow_segment=shadow.id,
            legacy_start=legacy_start,
            started_at=self.now(),
            updated_at=self.now(),
        )
        store = self._store(body.cluster)
        retention_ms = found.retention_hours * 3_600_000
        await store.create_topic(storage, shadow.partitions, retention_ms=retention_ms)
        try:
            await self.records.create(migration, shadow, found)
        except BaseException:
            await drop_storage(store, storage)
            raise
        return migration

    def _check_target(self, cluster: str) -> None:
        config = self.clusters.get(cluster)
        if config is None:
            configured = ", ".join(sorted(self.clusters))
            raise _invalid(
                "cluster", f"unknown storage cluster {cluster!r}; configured: {configured}"
            )
        if is_read_only(config):
            raise _invalid(
                "cluster",
                f"{cluster!r} is read_only; the shadow segment goes to a cluster httpbus writes",
            )

    def _external(self, found: Topic) -> Segment:
        """The topic's active segment, which must be external (an adopted Kafka topic)."""
        active = found.active_segment
        if active is None:
            raise NotFound(f"topic {found.project}/{found.name} has no active segment")
        if not is_read_only(self.clusters.get(active.cluster)):
            raise ValidationFailed(
                f"topic {found.project}/{found.name} writes segment {active.id} on "
                f"{active.cluster!r}, not an adopted (external) Kafka topic: only a topic "
                "created with external_topic is migrated; move it with `httpbus topic "
                "migrate` (a cutover) instead"
            )
        return active

    async def _quiet(self, found: Topic) -> None:
        """409 while the topic is in a cutover or in a migration already."""
        cutover = await self.cutovers.records.get(found.project, found.name)
        if cutover is not None and cutover[0].phase not in TERMINAL:
            raise CutoverInProgress(
                f"topic {found.project}/{found.name} is in cutover {cutover[0].id} "
                f"({cutover[0].phase}); wait for it to end"
            )
        await self.cutovers.check_no_migration(found.project, found.name)

    def _store(self, cluster: str) -> SegmentStore:
        store = self.stores.get(cluster)
        if store is None:
            raise _invalid("cluster", f"storage cluster {cluster!r} is not opened here")
        return store

    async def get(self, project: str, topic: str) -> Migration:
        found = await self.records.get(project, topic)
        return await recorded(self.catalog, found, project, topic, "migration")

    async def abandon(self, project: str, topic: str) -> Migration:
        """End the dual write: the shadow segment stays PENDING without ``dual_write`` (its
        id is never reused) and its storage is deleted; producers are refused again, the
        legacy producers go on as before. A finished migration is returned as it is; one
        past its switch is refused (409)."""
        for _ in range(_CAS_RETRIES):
            found = await self.records.get(project, topic)
            if found is None:
                raise NotFound(f"topic {project}/{topic} has had no migration")
            migration, version = found
            if migration.finished:
                return migration
            if migration.state is not MigrationState.DUAL_WRITE:
                raise MigrationInProgress(
                    f"migration {migration.id} of {project}/{topic} is {migration.state}: "
                    "past the switch it cannot be abandoned (a dirty window within the "
                    "guard period rolls it back)"
                )
            shadow = await self.catalog.get_segment(project, topic, migration.shadow_segment)
            ended = migration.model_copy(
                update={"state": MigrationState.ABANDONED, "updated_at": self.now()}
            )
            with contextlib.suppress(VersionConflict):
                await self.records.end_dual_write(
                    ended, version, shadow.model_copy(update={"dual_write": False})
                )
                store = self.stores.get(shadow.cluster)
                if store is not None:
                    await drop_storage(store, shadow.storage_topic)
                return ended
        raise VersionConflict(f"migration of {project}/{topic} keeps changing; try again")


def window_view(window: MigrationWindow) -> dict[str, Any]:
    """The API's view of one window (``WindowView``): its fields and its verdict."""
    return {**window.model_dump(), "clean": window.clean}


def view(migration: Migration) -> dict[str, Any]:
    """The API's view of ``migration`` (also what the CLI prints)."""
    windows = [window_view(w) for w in migration.windows]
    return {**migration.model_dump(), "windows": windows, "clean_streak": migration.streak}

"""Cutovers as the API and every role see them: start, read and abort (any control plane).

Starting or aborting a cutover is a compare-and-set on the topic's cutover document
(:mod:`segments.cutover.records`); the elected coordinator
(:mod:`control_plane.leaders.cutover_coordinator`) drives what is started here, and the
failover and migration leaders start theirs through this facade too.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TypeVar

from control_plane.settings import ControlPlaneSettings
from core.errors import (
    CutoverCommitted,
    MigrationInProgress,
    NotFound,
    ValidationFailed,
    VersionConflict,
)
from core.model import Topic, utcnow
from metastore.catalog import Catalog
from metastore.migrations import MigrationRecords
from metastore.protocol import MetaStore
from segments.config import ClusterConfig
from segments.cutover.machine import TERMINAL as TERMINAL_PHASES
from segments.cutover.machine import AbortRequested, Clock, Cutover, Timeouts, begin, step
from segments.cutover.records import CutoverRecords

T = TypeVar("T")
PRODUCERS = "producers"  # the membership group of the live producer processes


async def recorded(
    catalog: Catalog, found: tuple[T, int] | None, project: str, topic: str, what: str
) -> T:
    """The record ``found`` of a topic's ``what`` (cutover, migration); if there is none, a
    404 that names the topic if it is absent, else says it has had no ``what``."""
    if found is None:
        await catalog.get_topic(project, topic)  # 404 names the topic if it is absent
        raise NotFound(f"topic {project}/{topic} has had no {what}")
    return found[0]


def timeouts_of(settings: ControlPlaneSettings) -> Timeouts:
    """The cutover phases' deadlines the settings give."""
    return Timeouts(
        prepare_s=settings.cutover_prepare_timeout_s,
        switch_s=settings.cutover_switch_timeout_s,
        complete_s=settings.cutover_complete_timeout_s,
        settle_s=settings.cutover_settle_s,
        failover_phase_s=settings.failover_phase_timeout_s,
    )


class Cutovers:
    """Start, read and abort cutovers (any control plane; the leader drives them)."""

    def __init__(
        self,
        metastore: MetaStore,
        catalog: Catalog,
        clusters: dict[str, ClusterConfig],
        timeouts: Timeouts,
        prefix: str,
        now: Callable[[], datetime] = utcnow,
    ) -> None:
        self.metastore = metastore
        self.catalog = catalog
        self.records = CutoverRecords(metastore)
        self.migrations = MigrationRecords(metastore)
        self.clusters = clusters
        self.timeouts = timeouts
        self.prefix = prefix
        self.now = now

    async def start(
        self,
        project: str,
        topic: str,
        cluster: str,
        partitions: int,
        *,
        failover: str | None = None,
        from_segment: int | None = None,
        migration: str | None = None,
        onto: tuple[int, str] | None = None,
    ) -> Cutover:
        """Begin a cutover of ``project/topic`` to a fresh segment on ``cluster``; with
        ``failover`` (its reason), an emergency one of segment ``from_segment`` (a
        ``VersionConflict`` if the pointer left it meanwhile). A verified migration's
        ``switch`` or ``rollback`` (``migration``) names its new segment's id and storage
        topic (``onto``: the shadow segment, or the legacy topic again)."""
        if cluster not in self.clusters:
            raise ValidationFailed(
                f"cluster: unknown storage cluster {cluster!r}; configured: "
                f"{', '.join(sorted(self.clusters))}",
                details={"fields": [{"field": "cluster", "problem": "unknown cluster"}]},
            )
        found = await self.catalog.get_topic(project, topic)
        if found.produce_pointer is None:
            raise NotFound(f"topic {project}/{topic} has no active segment")
        if from_segment is not None and found.produce_pointer.segment_id != from_segment:
            raise VersionConflict(f"{project}/{topic} no longer writes segment {from_segment}")
        if migration is None:
            await self.check_no_migration(project, topic)
        target, storage = onto or await self.next_segment(found)
        live = await self.metastore.members(PRODUCERS)
        out = begin(
            uuid.uuid4().hex[:12],
            project,
            topic,
            found.produce_pointer.segment_id,
            target,
            cluster,
            partitions,
            storage,
            live=live,
            clock=Clock(self.now(), self.timeouts),
            failover=failover,
            migration=migration,
        )
        await self.records.create(out.state, found.version)
        return out.state

    async def next_segment(self, found: Topic) -> tuple[int, str]:
        """A new segment id of ``found`` and a fresh storage topic name for it. An id is
        never reused, not even that of a cutover aborted before its segment existed."""
        last = await self.records.get(found.project, found.name)
        target = max([s.id for s in found.segments] + [last[0].to_segment if last else 0]) + 1
        storage = f"{self.prefix}.{found.project}.{found.name}.s{target}.{uuid.uuid4().hex[:8]}"
        return target, storage

    async def check_no_migration(self, project: str, topic: str) -> None:
        """A cutover of a topic in a verified migration's dual write is refused: the
        migration's own switch moves it (core.migration)."""
        found = await self.migrations.get(project, topic)
        if found is not None and not found[0].finished:
            raise MigrationInProgress(
                f"topic {project}/{topic} is in migration {found[0].id} ({found[0].state}): "
                "abandon it before a cutover"
            )

    async def get(self, project: str, topic: str) -> Cutover:
        found = await self.records.get(project, topic)
        return await recorded(self.catalog, found, project, topic, "cutover")

    async def abort(self, project: str, topic: str) -> Cutover:
        """Abort before COMMIT (409 after); the leader then drops the target."""
        while True:
            found = await self.records.get(project, topic)
            if found is None:
                raise NotFound(f"topic {project}/{topic} has had no cutover")
            state, version = found
            if state.phase in TERMINAL_PHASES and state.phase.value != "COMPLETE":
                return state
            out = step(state, AbortRequested(), Clock(self.now(), self.timeouts))
            if out.refused is not None:
                raise CutoverCommitted(f"cutover {state.id} of {project}/{topic}: {out.refused}")
            try:
                await self.records.put(out.state, version)
            except VersionConflict:
                continue
            return out.state


def cutovers_of(settings: ControlPlaneSettings, metastore: MetaStore) -> Cutovers:
    """The control plane's cutovers, as its settings configure them."""
    return Cutovers(
        metastore,
        Catalog(metastore),
        settings.clusters,
        timeouts_of(settings),
        settings.storage_topic_prefix,
    )

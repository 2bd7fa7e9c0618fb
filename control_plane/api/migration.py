"""``/v1/projects/{project}/topics/{topic}/migration``: start, read and abandon a verified
migration of a topic whose active segment is an adopted Kafka topic (docs/migrating.md)."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, status
from pydantic import BaseModel, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import MigrationsDep, ProjectName, TopicName
from control_plane.api.schemas import MigrationStart
from control_plane.services.topic_migrations import view, window_view
from core.migration import MigrationState
from reports.migration_windows import MigrationWindows

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}/migration", tags=["migration"])


class WindowView(BaseModel):
    """One tumbling window of the check (``core.migration.MigrationWindow``) and its verdict."""

    start_ms: int
    end_ms: int
    matched: int
    late: int
    missing_in_bus: int
    missing_in_legacy: int
    duplicates: int
    closed: bool
    missing_in_bus_ids: list[str] = Field(description="the first 20")
    missing_in_legacy_ids: list[str] = Field(description="the first 20")
    late_ids: list[str] = Field(description="the first 20")
    clean: bool = Field(description="closed, nothing missing on either side, nothing late")


class MigrationView(BaseModel):
    """A migration as the API shows it: its settings, state and stored windows."""

    id: str
    project: str
    topic: str
    state: MigrationState
    cluster: str
    partitions: int
    window_s: int
    session_gap_s: int
    clean_windows: int
    guard_s: int
    external_segment: int
    shadow_segment: int
    legacy_start: dict[int, int]
    started_at: datetime
    updated_at: datetime
    checked_at: datetime | None
    reason: str | None
    cutover_id: str | None = Field(description="the switch's or the rollback's cutover")
    switched_at: datetime | None
    switch_ends: dict[int, int] | None = Field(description="E: the external segment's ends")
    shadow_starts: dict[int, int] | None = Field(
        description="where readers begin the shadow segment after the switch"
    )
    switch_skipped: int | None = Field(
        description="ids the legacy side delivered, passed over in the shadow segment"
    )
    switch_duplicates: int | None = Field(
        description="messages the switch delivers twice (skips over the skip list's cap)"
    )
    rollback_segment: int | None
    rollback_starts: dict[int, int] | None = Field(
        description="where readers begin the legacy topic again after a rollback"
    )
    rollback_skipped: int | None = Field(
        description="ids the shadow segment delivered, passed over in the legacy topic"
    )
    rollback_duplicates: int | None = Field(
        description="messages the rollback delivers twice (skips over the skip list's cap)"
    )
    finished_at: datetime | None
    clean_streak: int = Field(description="closed clean windows in a row at the end")
    windows: list[WindowView] = Field(description="oldest first, the newest 200 at most")


@router.post("", status_code=status.HTTP_201_CREATED, response_model=MigrationView, **OWNER)
async def start_migration(
    project: ProjectName, topic: TopicName, body: MigrationStart, migrations: MigrationsDep
) -> dict[str, Any]:
    """Begin the dual write onto a shadow segment on ``cluster``: from now on the topic's
    producers write it while subscriptions deliver from the external segment. 422 unless the
    topic's active segment is external and the cluster one httpbus writes; 409 while a
    cutover or another migration runs."""
    return view(await migrations.start(project, topic, body))


@router.get("", response_model=MigrationView, **VIEWER)
async def get_migration(
    project: ProjectName, topic: TopicName, migrations: MigrationsDep
) -> dict[str, Any]:
    """The topic's latest migration: its state and the windows the check stored."""
    return view(await migrations.get(project, topic))


class WindowHistory(BaseModel):
    """Every window the check stored for one migration (the report database)."""

    migration: str = Field(description="the migration's id")
    windows: list[WindowView] = Field(description="oldest first")


@router.get("/windows", response_model=WindowHistory, **VIEWER)
async def migration_windows(
    project: ProjectName,
    topic: TopicName,
    migrations: MigrationsDep,
    request: Request,
    since_ms: Annotated[int, Query(ge=0, description="windows starting at or after")] = 0,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1_000,
) -> dict[str, Any]:
    """Every window the check stored for the topic's latest migration, oldest first, from
    the report database (``database_url``): the migration itself keeps the newest 200."""
    m = await migrations.get(project, topic)
    history: MigrationWindows = request.app.state.migration_windows
    found = await asyncio.to_thread(
        history.history, project, topic, m.id, since_ms=since_ms, limit=limit
    )
    return {"migration": m.id, "windows": [window_view(w) for w in found]}


@router.delete("", response_model=MigrationView, **OWNER)
async def abandon_migration(
    project: ProjectName, topic: TopicName, migrations: MigrationsDep
) -> dict[str, Any]:
    """Abandon the dual write: the shadow segment's storage is deleted and producers are
    refused again (the legacy producers carry on); an abandoned migration is returned as is."""
    return view(await migrations.abandon(project, topic))

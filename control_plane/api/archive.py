"""``/v1/projects/{project}/topics/{topic}/archive``: what the archiver wrote of a topic
(:mod:`control_plane.services.archive`; docs/archive.md)."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from control_plane.api.auth import VIEWER
from control_plane.api.deps import AdminDep, ProjectName, TopicName
from control_plane.services import archive
from core.errors import NotFound

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}", tags=["topics"])


class ArchivedWindow(BaseModel):
    start: str = Field(description="the window's start (RFC 3339, UTC)")
    end: str
    key: str = Field(description="its Parquet file, under the archive's URL")
    messages: int
    duplicates: int = Field(description="copies of a message already in the file, left out")
    bytes: int
    archived_at: str


class ArchiveListing(BaseModel):
    to: str = Field(description="the archive's URL")
    every: str
    keep_days: int | None
    archived_until: str | None = Field(
        description="every message accepted before this time is in a window below (or "
        "expired by keep_days); null: nothing archived yet"
    )
    windows: list[ArchivedWindow]


@router.get("/archive", **VIEWER)
async def archive_listing(
    project: ProjectName, topic: TopicName, admin: AdminDep
) -> ArchiveListing:
    """The windows of the topic's archive, oldest first. 404 ``not_found`` if the topic has
    no ``archive`` setting."""
    t = await admin.catalog.get_topic(project, topic)
    if t.archive is None:
        raise NotFound(
            f"topic {project}/{topic} has no archive: set one with httpbus topic update "
            "--archive-to s3://bucket/prefix"
        )
    objects = archive.objects_of(admin.archive, t.archive)
    state = await archive.load_state(objects)
    return ArchiveListing(
        to=t.archive.to,
        every=t.archive.every,
        keep_days=t.archive.keep_days,
        **archive.describe(state),
    )

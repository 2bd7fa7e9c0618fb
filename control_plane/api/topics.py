"""``/v1/projects/{project}/topics`` and the segment timeline."""

from __future__ import annotations

from functools import partial

from fastapi import APIRouter, Query, Request, status
from starlette.concurrency import run_in_threadpool

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import (
    AdminDep,
    ListQueryDep,
    ProjectName,
    SearchTextsDep,
    TopicName,
    merged,
    project_page,
)
from control_plane.api.principals import principal_store
from control_plane.api.schemas import Page, Timeline, TopicCreate, TopicUpdate
from core.model import Topic

router = APIRouter(prefix="/v1/projects/{project}/topics", tags=["topics"])


@router.post("", status_code=status.HTTP_201_CREATED, **OWNER)
async def create_topic(project: ProjectName, body: TopicCreate, admin: AdminDep) -> Topic:
    """Create a topic and its first segment (and that segment's storage topic)."""
    return await admin.create_topic(project, body)


@router.get("", **VIEWER)
async def list_topics(
    project: ProjectName, admin: AdminDep, query: ListQueryDep, search: SearchTextsDep
) -> Page[Topic]:
    """A page of the project's topics by name; ``q`` searches names and descriptions;
    ``next_cursor`` (null on the last page) and ``prev_cursor`` ask for the pages around."""
    fetch = partial(admin.catalog.get_topic, project)

    async def describe(names: list[str]) -> dict[str, str]:
        return {t.name: t.description for t in await admin.catalog.describe_topics(project, names)}

    texts = search.of(f"topics/{project}", describe)
    names_of = admin.catalog.list_topics
    many = partial(admin.catalog.get_topics, project)
    return await project_page(admin, project, names_of, query, fetch, texts, many)


@router.get("/{topic}", **VIEWER)
async def get_topic(project: ProjectName, topic: TopicName, admin: AdminDep) -> Topic:
    return await admin.catalog.get_topic(project, topic)


@router.put("/{topic}", **OWNER)
async def update_topic(
    project: ProjectName,
    topic: TopicName,
    body: TopicUpdate,
    admin: AdminDep,
    search: SearchTextsDep,
) -> Topic:
    search.forget(f"topics/{project}", topic)
    current = await admin.catalog.get_topic(project, topic)
    return await admin.update_topic(merged(current, body))


@router.delete("/{topic}", status_code=status.HTTP_204_NO_CONTENT, **OWNER)
async def delete_topic(
    project: ProjectName,
    topic: TopicName,
    admin: AdminDep,
    request: Request,
    force: bool = Query(False, description="delete its subscriptions too"),
) -> None:
    await admin.delete_topic(project, topic, force=force)
    await run_in_threadpool(principal_store(request).remove_topic_grants, project, topic)


@router.get("/{topic}/segments", **VIEWER)
async def segments(project: ProjectName, topic: TopicName, admin: AdminDep) -> Timeline:
    """The topic's timeline: every segment, oldest first, and the produce pointer."""
    found = await admin.catalog.get_topic(project, topic)
    return Timeline(
        project=project,
        topic=topic,
        produce_pointer=found.produce_pointer,
        segments=list(found.segments),
        failover=found.failover,
    )

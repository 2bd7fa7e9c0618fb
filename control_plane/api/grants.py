"""``/v1/projects/{project}/topics/{topic}/grants``: consent for other projects' subscriptions.

A subscription of project A to a topic of project B is made only if B's owner granted the
topic to A here; without a grant the creation answers 403 ``grant_required`` saying what to
ask for. Removing a grant stops new subscriptions; the ones made under it stay until deleted.
Deleting the topic removes its grants.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, status
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import (
    AdminDep,
    ListQueryIfAskedDep,
    ProjectName,
    TopicName,
    page_or_all,
)
from control_plane.api.principals import principal_store
from control_plane.api.schemas import Page
from core.errors import GrantRequired, ValidationFailed
from core.names import MAX_NAME, NAME_PATTERN, Name
from reports.principals import TopicGrant

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}/grants", tags=["grants"])
Grantee = Annotated[str, Path(pattern=NAME_PATTERN, max_length=MAX_NAME)]


class GrantCreate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    project: Name  # the project whose subscriptions may read the topic


class GrantView(BaseModel):
    project: str
    topic: str
    grantee: str
    created_at_ms: int


def _view(grant: TopicGrant) -> GrantView:
    return GrantView.model_validate(grant, from_attributes=True)


@router.post("", status_code=status.HTTP_201_CREATED, **OWNER)
async def add_grant(
    project: ProjectName, topic: TopicName, body: GrantCreate, admin: AdminDep, request: Request
) -> GrantView:
    """Let subscriptions of ``body.project`` read this topic (idempotent)."""
    await admin.catalog.get_topic(project, topic)
    if body.project not in await admin.catalog.list_projects():
        raise ValidationFailed(
            f"project: {body.project} does not exist",
            details={"fields": [{"field": "project", "problem": "unknown project"}]},
        )
    store = principal_store(request)
    return _view(await run_in_threadpool(store.add_topic_grant, project, topic, body.project))


@router.get("", **VIEWER)
async def list_grants(
    project: ProjectName,
    topic: TopicName,
    admin: AdminDep,
    request: Request,
    query: ListQueryIfAskedDep,
) -> list[GrantView] | Page[GrantView]:
    """The projects the topic is granted to. With any of ``q``, ``cursor``, ``limit``: a
    page by granted project (``q`` searches its name; ``next_cursor``, null on the last
    page, and ``prev_cursor`` ask for the pages around); without them the whole list, as
    before paging (deprecated)."""
    await admin.catalog.get_topic(project, topic)
    store = principal_store(request)
    found = [_view(g) for g in await run_in_threadpool(store.topic_grants, project, topic)]
    return await page_or_all(found, query, lambda g: g.grantee, lambda g: "")


@router.delete("/{grantee}", status_code=status.HTTP_204_NO_CONTENT, **OWNER)
async def remove_grant(
    project: ProjectName, topic: TopicName, grantee: Grantee, request: Request
) -> None:
    await run_in_threadpool(principal_store(request).remove_topic_grant, project, topic, grantee)


async def check_consent(request: Request, project: str, topic_ref: str) -> None:
    """Raise ``GrantRequired`` unless ``project`` may subscribe to ``topic_ref`` (``topic``
    of its own, or ``other/topic`` granted to it)."""
    owner, _, topic = topic_ref.rpartition("/")
    if not owner or owner == project:
        return
    store = principal_store(request)
    if not await run_in_threadpool(store.has_topic_grant, owner, topic, project):
        raise GrantRequired(
            f"topic {owner}/{topic} belongs to project {owner}: ask an owner of {owner} to "
            f"grant it to {project} (POST /v1/projects/{owner}/topics/{topic}/grants "
            f'{{"project": "{project}"}}) before subscribing',
            details={"topic": f"{owner}/{topic}", "grantee": project},
        )

"""``/v1/catalog`` and ``…/topics/{topic}/grant-requests``: the topic catalog and the requests
for consent made from it (docs/catalog.md).

The catalog admits every principal and shows each only the topics the rules let them see
(:mod:`control_plane.services.topic_catalog`). A grant request is made by an owner of the
project that would subscribe, not of the topic's, so its route admits every principal and
checks that; the topic's owners list, approve (which creates the grant) and refuse.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, status
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import ANY, OWNER, PrincipalDep
from control_plane.api.deps import (
    AdminDep,
    ListQueryIfAskedDep,
    ProjectName,
    TopicName,
    page_or_all,
)
from control_plane.api.principals import principal_store
from control_plane.api.schemas import Page
from control_plane.services.topic_catalog import CatalogEntry, CatalogPage, TopicCatalog
from core.grant_requests import MAX_REASON, GrantRequest, RequestState
from core.names import MAX_NAME, NAME_PATTERN, Name
from core.principals import Principal

router = APIRouter(tags=["catalog"])
Grantee = Annotated[str, Path(pattern=NAME_PATTERN, max_length=MAX_NAME)]
REQUESTS = "/v1/projects/{project}/topics/{topic}/grant-requests"


class GrantRequestCreate(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    project: Name = Field(description="your project, whose subscriptions would read the topic")
    reason: str = Field(default="", max_length=MAX_REASON, description="for the topic's owners")


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    note: str = Field(default="", max_length=MAX_REASON, description="for the requester")


def _catalog(admin: AdminDep, request: Request) -> TopicCatalog:
    return TopicCatalog(admin.catalog, principal_store(request))


@router.get("/v1/catalog", **ANY)
async def list_catalog(
    admin: AdminDep,
    principal: PrincipalDep,
    request: Request,
    q: Annotated[str, Query(max_length=200, description="search text")] = "",
    cursor: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
) -> CatalogPage:
    """The topics the caller may subscribe to or ask a grant for, by project and topic;
    ``q`` searches ``project/topic``, descriptions and owners (case-insensitive);
    ``next_cursor`` (null on the last page) fetches the next page."""
    return await _catalog(admin, request).page(principal, q, cursor, limit)


@router.get("/v1/catalog/{project}/{topic}", **ANY)
async def show_catalog_entry(
    project: ProjectName,
    topic: TopicName,
    admin: AdminDep,
    principal: PrincipalDep,
    request: Request,
) -> CatalogEntry:
    """One topic's entry, with its schema document; 404 unless the caller may see it."""
    return await _catalog(admin, request).entry(principal, project, topic)


@router.post(REQUESTS, status_code=status.HTTP_201_CREATED, **ANY)
async def request_grant(
    project: ProjectName,
    topic: TopicName,
    body: GrantRequestCreate,
    admin: AdminDep,
    principal: PrincipalDep,
    request: Request,
) -> GrantRequest:
    """Ask the topic's owners to grant it to ``body.project`` (you must own that project)."""
    catalog = _catalog(admin, request)
    return await catalog.request_grant(principal, project, topic, body.project, body.reason)


@router.get(REQUESTS, **OWNER)
async def list_grant_requests(
    project: ProjectName,
    topic: TopicName,
    admin: AdminDep,
    request: Request,
    query: ListQueryIfAskedDep,
    state: RequestState | None = None,
) -> list[GrantRequest] | Page[GrantRequest]:
    """The topic's requests by grantee (``state``: only those). With any of ``q``,
    ``cursor``, ``limit``: a page by grantee (``q`` searches grantees, requesters, reasons
    and notes; ``next_cursor``, null on the last page, and ``prev_cursor`` ask for the pages
    around); without them the whole list, as before paging (deprecated)."""
    found = await _catalog(admin, request).requests(project, topic, state)
    return await page_or_all(found, query, lambda r: r.grantee, _request_text)


def _request_text(r: GrantRequest) -> str:
    return " ".join([r.reason, r.requested_by, r.decided_by or "", r.note])


@dataclass(frozen=True)
class _Deciding:
    """A request's decision about to be made: whose, and by whom."""

    catalog: TopicCatalog
    principal: Principal
    project: str
    topic: str
    grantee: str
    note: str

    async def __call__(self, *, approve: bool) -> GrantRequest:
        return await self.catalog.decide(
            self.principal, self.project, self.topic, self.grantee, approve=approve, note=self.note
        )


def _deciding(
    project: ProjectName,
    topic: TopicName,
    grantee: Grantee,
    admin: AdminDep,
    principal: PrincipalDep,
    request: Request,
    body: Decision | None = None,
) -> _Deciding:
    """What approve and refuse both take (the same path, body and caller)."""
    note = body.note if body is not None else ""
    return _Deciding(_catalog(admin, request), principal, project, topic, grantee, note)


Deciding = Annotated[_Deciding, Depends(_deciding)]


@router.post(REQUESTS + "/{grantee}/approve", **OWNER)
async def approve_grant_request(decide: Deciding) -> GrantRequest:
    """Grant the topic to the requesting project and mark the request approved."""
    return await decide(approve=True)


@router.post(REQUESTS + "/{grantee}/refuse", **OWNER)
async def refuse_grant_request(decide: Deciding) -> GrantRequest:
    """Refuse the request (the requester may ask again)."""
    return await decide(approve=False)

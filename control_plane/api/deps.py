"""Shared pieces of the routers: the services (set on ``app.state`` at startup), name path
parameters, paging."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Query, Request
from pydantic import BaseModel

from control_plane.api.schemas import Page
from control_plane.services.admin import Admin
from control_plane.services.cutovers import Cutovers
from control_plane.services.topic_migrations import Migrations
from core.names import MAX_NAME, NAME_PATTERN

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)


def _service(name: str) -> Callable[[Request], Any]:
    """A dependency that gives the service the app's startup set as ``app.state.<name>``."""

    def service(request: Request) -> Any:
        return getattr(request.app.state, name)

    return service


AdminDep = Annotated[Admin, Depends(_service("admin"))]
CutoversDep = Annotated[Cutovers, Depends(_service("cutovers"))]
MigrationsDep = Annotated[Migrations, Depends(_service("migrations"))]
ProjectName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=MAX_NAME)]
TopicName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=MAX_NAME)]
SubscriptionName = Annotated[str, Path(pattern=NAME_PATTERN, max_length=MAX_NAME)]
Offset = Annotated[int, Query(ge=0, le=1_000_000)]
Limit = Annotated[int, Query(ge=1, le=500)]


async def page(
    names: list[str], offset: int, limit: int, fetch: Callable[[str], Awaitable[T]]
) -> Page[T]:
    """One page of entities, fetched by name (names are sorted by the metastore)."""
    chosen = names[offset : offset + limit]
    return Page[T](
        items=[await fetch(n) for n in chosen], total=len(names), offset=offset, limit=limit
    )


async def project_page(
    admin: Admin,
    project: str,
    names_of: Callable[[str], Awaitable[list[str]]],
    fetch: Callable[[str], Awaitable[T]],
    offset: int,
    limit: int,
) -> Page[T]:
    """One page of a project's entities (topics, subscriptions): 404 names the project when
    it is absent, rather than answering an empty page."""
    await admin.catalog.get_project(project)
    return await page(await names_of(project), offset, limit, fetch)


def merged(current: M, changes: BaseModel) -> M:
    """``current`` with the fields of ``changes``, validated again as a whole."""
    return type(current).model_validate({**current.model_dump(), **changes.model_dump()})

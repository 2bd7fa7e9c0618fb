"""Shared pieces of the routers: the Admin service, name path parameters, paging."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

from fastapi import Depends, Path, Query, Request
from pydantic import BaseModel

from control_plane.api.schemas import Page
from control_plane.services.admin import Admin
from core.names import MAX_NAME

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_-]*$"


def _admin(request: Request) -> Admin:
    admin: Admin = request.app.state.admin
    return admin


AdminDep = Annotated[Admin, Depends(_admin)]
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


def merged(current: M, changes: BaseModel) -> M:
    """``current`` with the fields of ``changes``, validated again as a whole."""
    return type(current).model_validate({**current.model_dump(), **changes.model_dump()})

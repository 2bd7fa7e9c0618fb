"""Shared pieces of the routers: the services (set on ``app.state`` at startup), name path
parameters, paging."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Query, Request
from pydantic import BaseModel

from control_plane.api.schemas import Page
from control_plane.services.admin import Admin
from control_plane.services.cutovers import Cutovers
from control_plane.services.listing import ListQuery, ListTexts, SearchTexts, Texts, page_of
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
Offset = Annotated[
    int | None,
    Query(
        ge=0,
        le=1_000_000,
        deprecated=True,
        description="deprecated: skip this many (a page may repeat or miss names created or "
        "deleted meanwhile); use cursor",
    ),
]
Limit = Annotated[int, Query(ge=1, le=500)]
Cursor = Annotated[
    str | None,
    Query(max_length=200, description="next_cursor or prev_cursor of the page before"),
]
Search = Annotated[
    str,
    Query(max_length=200, description="search text: in the name or description (any case)"),
]


def list_query(
    q: Search = "", cursor: Cursor = None, offset: Offset = None, limit: Limit = 100
) -> ListQuery:
    """The paging and search parameters every list route takes."""
    return ListQuery(q=q, cursor=cursor, offset=offset, limit=limit)


ListQueryDep = Annotated[ListQuery, Depends(list_query)]


def list_query_if_asked(
    q: Search = "", cursor: Cursor = None, offset: Offset = None, limit: Limit | None = None
) -> ListQuery | None:
    """The paging and search parameters of a list route that answered its whole list (a
    JSON array) before it paged: None when the request names none of ``q``, ``cursor``,
    ``offset``, ``limit`` (the whole list, as before), else the page they ask."""
    if not q and cursor is None and offset is None and limit is None:
        return None
    return ListQuery(q=q, cursor=cursor, offset=offset, limit=100 if limit is None else limit)


ListQueryIfAskedDep = Annotated[ListQuery | None, Depends(list_query_if_asked)]


def _search_texts(request: Request) -> SearchTexts:
    texts: SearchTexts = request.app.state.search_texts
    return texts


SearchTextsDep = Annotated[SearchTexts, Depends(_search_texts)]


async def page(
    names: list[str],
    query: ListQuery,
    fetch: Callable[[str], Awaitable[T]],
    texts: ListTexts | Texts | None = None,
    fetch_many: Callable[[list[str]], Awaitable[list[T]]] | None = None,
) -> Page[T]:
    """One page of entities, fetched by name (control_plane.services.listing); a page shown
    without a search starts reading the list's search texts (``ListTexts.warm``)."""
    found = await page_of(names, query, fetch, texts, fetch_many)
    if isinstance(texts, ListTexts) and not query.needle:
        texts.warm(names)
    return Page[T](
        items=found.items,
        total=found.total,
        offset=found.offset,
        limit=query.limit,
        next_cursor=found.next_cursor,
        prev_cursor=found.prev_cursor,
    )


async def project_page(
    admin: Admin,
    project: str,
    names_of: Callable[[str], Awaitable[list[str]]],
    query: ListQuery,
    fetch: Callable[[str], Awaitable[T]],
    texts: ListTexts | None = None,
    fetch_many: Callable[[list[str]], Awaitable[list[T]]] | None = None,
) -> Page[T]:
    """One page of a project's entities (topics, subscriptions): 404 names the project when
    it is absent, rather than answering an empty page."""
    await admin.catalog.get_project(project)
    return await page(await names_of(project), query, fetch, texts, fetch_many)


async def page_or_all(
    items: Iterable[T],
    query: ListQuery | None,
    name: Callable[[T], str],
    text: Callable[[T], str],
) -> list[T] | Page[T]:
    """A list read whole in one call (a relational table, one record): all of it as it
    was answered before paging (``query`` None: the request asked no page), or the page
    ``query`` asks, by the unique ``name`` of each item, ``q`` searching the name and
    ``text`` (roles, a description)."""
    every = list(items)
    if query is None:
        return every
    by_name = {name(item): item for item in every}

    async def fetch(found: str) -> T:
        return by_name[found]

    async def texts(names: list[str]) -> dict[str, str]:
        return {n: text(by_name[n]).lower() for n in names if n in by_name}

    return await page(list(by_name), query, fetch, texts)


def merged(current: M, changes: BaseModel) -> M:
    """``current`` with the fields of ``changes``, validated again as a whole."""
    return type(current).model_validate({**current.model_dump(), **changes.model_dump()})

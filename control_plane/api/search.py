"""``GET /v1/search?q=…``: the header search of the web UI. Topics and subscriptions whose
name contains ``q``, and the topics where a message with the id ``q`` was traced, in the
projects the caller may see."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.concurrency import run_in_threadpool

from control_plane.api.auth import ANY, PrincipalDep
from control_plane.api.deps import AdminDep
from metastore import paths
from reports.trace import TraceIndex

LIMIT = 20  # hits per kind


def router(index: TraceIndex) -> APIRouter:
    """The search route; message ids are looked up in the trace ``index``."""
    api = APIRouter(prefix="/v1", tags=["search"])

    @api.get("/search", **ANY)
    async def search(
        q: Annotated[
            str,
            Query(min_length=1, max_length=128, description="a name, part of one, or a message id"),
        ],
        admin: AdminDep,
        principal: PrincipalDep,
    ) -> dict[str, Any]:
        """Topics and subscriptions whose name contains ``q`` (case-insensitive), and the
        topics where the message ``q`` was traced; at most 20 of each, only in the projects
        the caller may see."""
        wanted = q.strip().lower()
        meta = admin.catalog.store
        every = await meta.children(paths.PROJECTS)
        visible = sorted(every if principal.is_admin else set(every) & principal.projects())
        topics, subs = await asyncio.gather(
            meta.children_many([paths.topics(p) for p in visible]),
            meta.children_many([paths.subscriptions(p) for p in visible]),
        )
        found_topics = [
            {"project": p, "topic": t}
            for p, names in zip(visible, topics, strict=True)
            for t in names
            if wanted in t.lower()
        ]
        found_subs = [
            {"project": p, "subscription": s}
            for p, names in zip(visible, subs, strict=True)
            for s in names
            if wanted in s.lower()
        ]
        where = await run_in_threadpool(index.where_is, q.strip(), visible, LIMIT)
        return {
            "q": q,
            "topics": found_topics[:LIMIT],
            "subscriptions": found_subs[:LIMIT],
            "messages": [{"project": p, "topic": t, "message_id": q.strip()} for p, t in where],
        }

    return api

"""``/v1/projects/{project}/topics/{topic}/messages/{message_id}``: where one message is and
what happened to it for every subscription of its topic; ``…/groups/{group}/messages``: the
last messages of a group. Read from the trace index (``reports.trace``), which the trace
indexer fills from the audit trail within seconds (docs/tracing.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query
from starlette.concurrency import run_in_threadpool

from control_plane.api.auth import VIEWER
from control_plane.api.deps import AdminDep, ProjectName, TopicName
from control_plane.services.trace_view import message_trace
from core.errors import NotFound
from reports.trace import TraceIndex

PREFIX = "/v1/projects/{project}/topics/{topic}"
MessageId = Annotated[str, Path(min_length=1, max_length=256)]
GroupId = Annotated[str, Path(min_length=1, max_length=256)]


def router(index: TraceIndex) -> APIRouter:
    """The trace routes on ``index``, for viewers of the topic's project."""
    api = APIRouter(prefix=PREFIX, tags=["trace"])

    @api.get("/messages/{message_id}", **VIEWER)
    async def trace_message(
        project: ProjectName, topic: TopicName, message_id: MessageId, admin: AdminDep
    ) -> dict[str, Any]:
        """Where the message is stored and, per subscription of the topic, its state
        (pending, delivering, retrying, delivered, filtered, dead_lettered) and attempts."""
        await admin.catalog.get_topic(project, topic)  # 404 for a topic that does not exist
        rows = await run_in_threadpool(index.message, project, topic, message_id)
        if not rows:
            raise NotFound(
                f"message {message_id} of {project}/{topic} is not in the trace index: never "
                "accepted, older than the retention, or accepted in the last seconds (events "
                "reach the index within 5 s)"
            )
        subs = await admin.catalog.subscribers(project, topic)
        names = [f"{p}/{s}" for p, s in subs]
        return message_trace(project, topic, message_id, rows, names)

    @api.get("/groups/{group}/messages", **VIEWER)
    async def trace_group(
        project: ProjectName,
        topic: TopicName,
        group: GroupId,
        admin: AdminDep,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
    ) -> dict[str, Any]:
        """The last ``limit`` messages accepted in ``group``, newest first, each traced."""
        await admin.catalog.get_topic(project, topic)
        ids = await run_in_threadpool(index.group, project, topic, group, limit)
        subs = [f"{p}/{s}" for p, s in await admin.catalog.subscribers(project, topic)]
        events = await run_in_threadpool(index.messages, project, topic, ids)
        traces = [message_trace(project, topic, m, events.get(m, []), subs) for m in ids]
        return {"group": group, "messages": traces}

    return api

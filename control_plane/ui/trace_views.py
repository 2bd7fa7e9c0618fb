"""The message trace page: where a message is stored and, per subscription, a timeline of
what happened to it (from ``GET …/messages/{id}``); a search box on it and on every topic
page, and a link from each DLQ entry."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import ApiError, path
from control_plane.ui.deps import ApiDep, Name, SessionDep
from control_plane.ui.render import redirect, render

router = APIRouter()
COLOURS = {
    "attempted": "#7a7a7a",
    "retried": "#e0a000",
    "delivered": "#2a8a3e",
    "filtered": "#4a6fa5",
    "dead_lettered": "#c0392b",
    "unsidelined": "#8e44ad",
    "recovered": "#8e44ad",
    "resent": "#16a085",
    "replayed": "#16a085",
}


def trace_url(project: str, topic: str, message_id: str) -> str:
    return f"/ui/projects/{project}/topics/{topic}/messages/{quote(message_id, safe='')}"


@router.get("/ui/trace")
async def search(request: Request, session: SessionDep) -> Response:
    """The search box's target: ``project``, ``topic`` and ``id`` to the trace page. With
    none of them (the page opened from a link) the empty search form, not a refusal."""
    q = request.query_params
    project, topic, mid = (q.get(k, "").strip() for k in ("project", "topic", "id"))
    if not (project and topic and mid):
        partly = bool(project or topic or mid)
        return render(
            request,
            "trace.html",
            session,
            422 if partly else 200,
            project=project,
            topic=topic,
            message_id=mid,
            trace=None,
            missing="Give the project, the topic and the message id." if partly else None,
        )
    return redirect(request, trace_url(project, topic, mid))


@router.get("/ui/projects/{project}/topics/{topic}/messages/{message_id}")
async def show(
    project: Name, topic: Name, message_id: str, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    try:
        trace = await api.get(
            path("v1", "projects", project, "topics", topic, "messages", message_id)
        )
    except ApiError as exc:
        if exc.status != 404:
            raise
        return render(
            request,
            "trace.html",
            session,
            404,
            project=project,
            topic=topic,
            message_id=message_id,
            trace=None,
            missing=exc.message,
        )
    return render(
        request,
        "trace.html",
        session,
        project=project,
        topic=topic,
        message_id=message_id,
        trace=trace,
        timelines=[_timeline(trace, sub) for sub in trace["subscriptions"]],
        missing=None,
    )


def _ms(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() * 1000 if text else None


def _timeline(trace: dict[str, Any], sub: dict[str, Any]) -> dict[str, Any]:
    """One subscription's events as marks on a line from acceptance to the last event."""
    stored = trace.get("stored") or {}
    start = _ms(stored.get("accepted_at"))
    times = [t for t in (_ms(e["at"]) for e in sub["events"]) if t is not None]
    first = start if start is not None else (min(times) if times else 0.0)
    span = max([*times, first]) - first or 1.0
    marks = []
    for event in sub["events"]:
        at = _ms(event["at"]) or first
        marks.append(
            {
                **event,
                "x": round(16 + 768 * (at - first) / span, 1),
                "after_ms": round(at - first),
                "colour": COLOURS.get(event["type"], "#555"),
            }
        )
    return {**sub, "marks": marks, "span_ms": round(span) if times else 0}

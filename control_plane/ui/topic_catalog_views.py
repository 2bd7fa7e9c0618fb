"""The topic catalog's pages (docs/catalog.md): search the topics of every project the caller
may subscribe to or ask for, a topic's card with its "Request access" form, and the grant
requests its owners approve or refuse on the topic's page."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import AdminClient, ApiError, NotAvailable, path
from control_plane.ui.deps import ApiDep, FormDep, Name, SessionDep
from control_plane.ui.render import redirect, refused, render

router = APIRouter()


@router.get("/ui/catalog")
async def catalog(request: Request, session: SessionDep, api: ApiDep) -> Response:
    q = request.query_params.get("q", "")[:200]
    cursor = request.query_params.get("cursor", "")[:200]
    params: dict[str, Any] = {"limit": 50} | ({"q": q} if q else {})
    if cursor:
        params["cursor"] = cursor
    try:
        page = await api.get(path("v1", "catalog"), params)
    except ApiError as exc:
        if exc.status != 400:  # a cursor typed by hand: start again
            raise
        return redirect(request, "/ui/catalog", exc.message, "error")
    more = None
    if page["next_cursor"]:
        more = "/ui/catalog?" + urlencode({"q": q, "cursor": page["next_cursor"]})
    return render(request, "catalog.html", session, page=page, q=q, more=more, first=not cursor)


@router.get("/ui/catalog/{project}/{topic}")
async def catalog_topic(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    entry = await api.get(path("v1", "catalog", project, topic))
    schema = entry.get("schema")
    document = json.dumps(schema["document"], indent=2) if schema and schema["document"] else None
    example = json.dumps(entry["example"], indent=2) if entry.get("example") is not None else None
    link = None
    if entry["subscribe_as"]:
        mine = entry["subscribe_as"][0]
        ref = topic if mine == project else f"{project}/{topic}"
        link = f"/ui/projects/{mine}/subscriptions/new?" + urlencode({"topic": ref})
    return render(
        request,
        "catalog_topic.html",
        session,
        entry=entry,
        subscribe_link=link,
        schema_text=document,
        example_text=example,
    )


@router.post("/ui/catalog/{project}/{topic}/request")
async def request_access(
    project: Name, topic: Name, request: Request, form: FormDep, api: ApiDep
) -> Response:
    back = f"/ui/catalog/{project}/{topic}"
    body = {"project": form.get("project", ""), "reason": form.get("reason", "")}
    try:
        await api.post(path("v1", "projects", project, "topics", topic, "grant-requests"), body)
    except ApiError as exc:
        return refused(request, back, exc, "not requested")
    message = f"asked the owners of {project} to grant {topic} to {body['project']}"
    return redirect(request, back, message)


@router.post("/ui/projects/{project}/topics/{topic}/grant-requests/{grantee}/{decision}")
async def decide(
    project: Name,
    topic: Name,
    grantee: Name,
    decision: str,
    request: Request,
    form: FormDep,
    api: ApiDep,
) -> Response:
    back = f"/ui/projects/{project}/topics/{topic}"
    if decision not in ("approve", "refuse"):
        return redirect(request, back, f"unknown decision {decision!r}", "error")
    where = path("v1", "projects", project, "topics", topic, "grant-requests", grantee, decision)
    try:
        await api.post(where, {"note": form.get("note", "")})
    except ApiError as exc:
        return refused(request, back, exc, f"not {decision}d")
    return redirect(request, back, f"{decision}d the request of {grantee}")


async def pending_requests(api: AdminClient, project: str, topic: str) -> list[Any] | None:
    """The topic's pending grant requests for its page, or None when the caller may not
    decide them (not an owner) or this control plane has no catalog."""
    where = path("v1", "projects", project, "topics", topic, "grant-requests")
    try:
        found = await api.get(where, {"state": "pending"})
    except NotAvailable:
        return None
    except ApiError as exc:
        if exc.status in (403, 404):
            return None
        raise
    return list(found)

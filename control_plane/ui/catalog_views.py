"""Projects and topics: paged lists, creation forms, the segment timeline and the archive
section; a project's notification settings (which operational events go to its notification
URL)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import AdminClient, ApiError, NotAvailable, path
from control_plane.ui.archive_listing import SHOWN, archive_of
from control_plane.ui.deps import ApiDep, FormDep, FormListsDep, Name, SessionDep
from control_plane.ui.render import listed, open_by_name, redirect, refused, render
from control_plane.ui.timeline import draw
from control_plane.ui.topic_catalog_views import pending_requests

router = APIRouter()


@router.get("/ui/projects")
async def projects(request: Request, session: SessionDep, api: ApiDep) -> Response:
    wanted = await open_by_name(request, api, "project", path("v1", "projects"), "/ui/projects")
    if wanted.url:
        return redirect(request, f"{wanted.url}/topics")
    shown = await listed(request, api, path("v1", "projects"), "/ui/projects", wanted.problem)
    return render(request, "projects.html", session, **shown)


@router.post("/ui/projects")
async def create_project(request: Request, form: FormDep, api: ApiDep) -> Response:
    body = {"name": form.get("name", "").strip(), "description": form.get("description", "")}
    try:
        await api.post(path("v1", "projects"), body)
    except ApiError as exc:
        if exc.status in (0, 404) or exc.status >= 500:
            raise
        return redirect(request, "/ui/projects", f"not created: {exc.message}", "error")
    return redirect(
        request, f"/ui/projects/{body['name']}/topics", f"created project {body['name']}"
    )


@router.get("/ui/projects/{project}")
async def project_home(project: Name, session: SessionDep, request: Request) -> Response:
    return redirect(request, f"/ui/projects/{project}/topics")


@router.get("/ui/projects/{project}/topics")
async def topics(project: Name, request: Request, session: SessionDep, api: ApiDep) -> Response:
    base = f"/ui/projects/{project}/topics"
    # "open by name": no paging through 1 000 topics
    api_base = path("v1", "projects", project, "topics")
    wanted = await open_by_name(request, api, "topic", api_base, base)
    if wanted.url:
        return redirect(request, wanted.url)
    shown = await listed(request, api, api_base, base, wanted.problem)
    usage = await api.get(path("v1", "projects", project, "quota"))
    return render(
        request,
        "topics.html",
        session,
        project=project,
        notices=await _notices(api, project),
        notice_kinds=NOTICE_KINDS,
        quota_rows=quota_rows(usage),
        **shown,
        clusters=request.app.state.ui_clusters,
        default_cluster=request.app.state.ui_default_cluster,
    )


NOTICE_KINDS = (  # (kind, what it says), in the order the form lists them
    ("subscription.failing", "every attempt failed for a while"),
    ("subscription.recovered", "an attempt succeeded after that"),
    ("subscription.dead_lettered", "messages exhausted to the DLQ (a count per interval)"),
    ("subscription.circuit_opened", "the circuit opened (at most once per interval)"),
    ("subscription.circuit_closed", "the circuit closed again"),
    ("subscription.disabled", "the endpoint was disabled"),
    ("subscription.enabled", "it was enabled again"),
)


async def _notices(api: AdminClient, project: str) -> dict[str, Any] | None:
    """The project's notification URL and settings (None where the API does not say)."""
    try:
        found = await api.get(path("v1", "projects", project))
    except (NotAvailable, ApiError):
        return None
    settings = found.get("notifications") if isinstance(found, dict) else None
    if settings is None:
        return None
    return {"url": found.get("notification_url"), "version": found.get("version"), **settings}


@router.post("/ui/projects/{project}/notifications")
async def notifications(
    project: Name, request: Request, form: FormListsDep, api: ApiDep
) -> Response:
    """Save which operational events go to the notification URL (``PUT /v1/projects/{p}``,
    a compare-and-set on the version the form was read at)."""
    back = f"/ui/projects/{project}/topics"
    known = {kind for kind, _ in NOTICE_KINDS}
    events = sorted(kind for kind in form.get("events", []) if kind in known)

    def one(name: str) -> str:
        return (form.get(name) or [""])[0]

    current = await api.get(path("v1", "projects", project))
    body: dict[str, Any] = {
        "description": current.get("description", ""),
        "notifications": {
            "events": events,
            "failing_after_s": _int(one("failing_after_s")),
            "interval_s": _int(one("interval_s")),
        },
        "version": _int(one("version")),
    }
    url = one("notification_url").strip()
    body["notification_url"] = url or None
    try:
        await api.put(path("v1", "projects", project), body)
    except ApiError as exc:
        return refused(request, back, exc, "notifications not saved")
    said = ", ".join(e.removeprefix("subscription.") for e in events) or "none"
    return redirect(request, back, f"notifications saved: {said}")


def _int(text: Any) -> Any:
    """A number field as a number (the API names a field that is not one)."""
    try:
        return int(str(text).strip())
    except ValueError:
        return text


@router.post("/ui/projects/{project}/topics")
async def create_topic(project: Name, request: Request, form: FormDep, api: ApiDep) -> Response:
    name = form.get("name", "").strip()
    back = f"/ui/projects/{project}/topics"
    try:
        body: dict[str, Any] = {
            "name": name,
            "partitions": int(form.get("partitions") or 1),
            "grouped": form.get("grouped") == "on",
        }
    except ValueError:
        return redirect(request, back, "not created: partitions must be a whole number", "error")
    if form.get("cluster"):
        body["cluster"] = form["cluster"]
    if form.get("dedupe_window", "").strip():
        body["dedupe_window"] = form["dedupe_window"].strip()
    try:
        await api.post(path("v1", "projects", project, "topics"), body)
    except ApiError as exc:
        return refused(request, back, exc, "not created")
    return redirect(request, f"{back}/{name}", f"created topic {name}")


async def _latest_cutover(api: AdminClient, project: str, topic: str) -> tuple[Any, bool]:
    """The latest cutover (or None) and whether this control plane runs cutovers at all."""
    try:
        return await api.get(path("v1", "projects", project, "topics", topic, "cutover")), True
    except NotAvailable:
        return None, False
    except ApiError as exc:
        if exc.status == 404:
            return None, True
        raise


async def _schema(api: AdminClient, project: str, topic: str) -> tuple[Any, str | None]:
    """The topic's schema versions (None: it never had a schema) and, while it validates,
    its latest schema as indented JSON."""
    where = path("v1", "projects", project, "topics", topic, "schema")
    try:
        versions = await api.get(f"{where}/versions")
    except ApiError as exc:
        if exc.status == 404:
            return None, None
        raise
    if not versions["active"]:
        return versions, None
    latest = await api.get(where)
    return versions, json.dumps(latest["schema"], indent=2)


@router.get("/ui/projects/{project}/topics/{topic}")
async def topic_page(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    found = await api.get(path("v1", "projects", project, "topics", topic))
    timeline = await api.get(path("v1", "projects", project, "topics", topic, "segments"))
    cutover, cutovers = await _latest_cutover(api, project, topic)
    schema_versions, schema_text = await _schema(api, project, topic)
    archive, archive_problem = await archive_of(api, project, found)
    return render(
        request,
        "topic.html",
        session,
        grant_requests=await pending_requests(api, project, topic),
        schema_versions=schema_versions,
        schema_text=schema_text,
        project=project,
        topic=found,
        timeline=timeline,
        picture=draw(timeline),
        cutover=cutover,
        cutovers_available=cutovers,
        clusters=request.app.state.ui_clusters,
        archive=archive,
        archive_problem=archive_problem,
        archive_shown=SHOWN,
    )


def quota_rows(usage: dict[str, Any]) -> list[tuple[str, float, float | None]]:
    """``(what, used, limit)`` of each quota of the project page's usage bars (the limit
    None: unlimited, no bar)."""
    quota = usage["quota"]
    return [
        ("messages/s", usage["messages_per_second"], quota["messages_per_second"]),
        ("bytes/s", usage["bytes_per_second"], quota["bytes_per_second"]),
        ("topics", usage["topics"], quota["max_topics"]),
        ("subscriptions", usage["subscriptions"], quota["max_subscriptions"]),
    ]

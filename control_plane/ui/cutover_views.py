"""The cutover page: start a migration, watch its phases advance live, abort it."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import AdminClient
from control_plane.ui.deps import ApiDep, FormDep, Name, SessionDep
from control_plane.ui.render import (
    confirmation,
    confirmed,
    posted,
    redirect,
    render,
    templates,
)
from control_plane.ui.topic_process import TopicProcess

router = APIRouter()

PHASES = ("PREPARE", "SWITCH", "COMMIT", "COMPLETE")
FINAL = ("COMPLETE", "ABORTED", "ROLLED_BACK")
ACKS = (("prepared", "prepared_at"), ("switched", "switched_at"), ("committed", "committed_at"))
CUTOVER = TopicProcess(
    "cutover",
    unavailable="Cutover is not available on this control plane.",
    none_yet="This topic has had no cutover yet.",
    not_ended="not aborted",
    ended="abort requested",
    question="Abort the cutover of {name}? Producers go back to the current segment.",
    yes="Yes, abort",
)


def view_of(cutover: dict[str, Any]) -> dict[str, Any]:
    """What the page draws: each phase done / current / to come, acks per producer."""
    phase = str(cutover.get("phase", ""))
    reached = PHASES.index(phase) if phase in PHASES else -1
    if phase not in PHASES:  # aborted or rolled back: the phases it passed have times
        reached = max(
            (i for i, p in enumerate(PHASES) if p in cutover.get("phase_times", {})), default=-1
        )
    steps = [
        {
            "name": p,
            "state": "done"
            if i < reached or phase == "COMPLETE"
            else "current"
            if i == reached
            else "todo",
            "at": (cutover.get("phase_times") or {}).get(p),
        }
        for i, p in enumerate(PHASES)
    ]
    producers = [
        {"member": member, **{label: acks.get(key) for label, key in ACKS}}
        for member, acks in sorted((cutover.get("producers") or {}).items())
    ]
    return {
        "steps": steps,
        "producers": producers,
        "final": phase in FINAL,
        "failed": phase in FINAL[1:],
    }


@router.post("/ui/projects/{project}/topics/{topic}/cutover")
async def start(
    project: Name, topic: Name, request: Request, session: SessionDep, form: FormDep, api: ApiDep
) -> Response:
    """Start a cutover, once the person was asked: it moves every producer, and past COMMIT
    only another cutover undoes it."""
    back = f"/ui/projects/{project}/topics/{topic}"
    try:
        partitions = int(form.get("partitions", ""))
    except ValueError:
        return redirect(request, back, "partitions must be a whole number", "error")
    cluster = form.get("cluster", "")
    body = {"cluster": cluster, "partitions": partitions}
    if not cluster:
        return redirect(request, back, "choose the cluster to cut over to", "error")
    if not confirmed(form):
        question = (
            f"Start a cutover of {project}/{topic} to {cluster} with {partitions} "
            "partition(s)? Every producer switches to a new segment; after COMMIT there is no "
            "going back."
        )
        fields = {"cluster": cluster, "partitions": str(partitions)}
        path = str(request.url.path)
        return confirmation(
            request, session, question, action=path, back=back, yes="Yes, start", fields=fields
        )
    where = CUTOVER.api_path(project, topic)
    started = await posted(
        request, api, where, body, back=back, what="cutover", failed="cutover not started"
    )
    if isinstance(started, Response):
        return started
    return redirect(request, f"{back}/cutover", "cutover started")


@router.post("/ui/projects/{project}/topics/{topic}/cutover/abort")
async def abort(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    return await CUTOVER.end(request, session, api, project, topic)


async def _shown(api: AdminClient, project: str, topic: str) -> dict[str, Any]:
    """The cutover, what the page draws of it, or why there is none."""
    cutover, missing = await CUTOVER.fetch(api, project, topic)
    return {"cutover": cutover, "view": view_of(cutover) if cutover else None, "missing": missing}


@router.get("/ui/projects/{project}/topics/{topic}/cutover")
async def page(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    shown = await _shown(api, project, topic)
    return render(request, "cutover.html", session, project=project, topic=topic, **shown)


@router.get("/ui/projects/{project}/topics/{topic}/cutover/live")
async def live(
    project: Name, topic: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    """The changing part of the page, fetched again every second until the cutover ends."""
    context = {"request": request, **await _shown(api, project, topic)}
    response = templates.TemplateResponse(request, "_cutover_live.html", context)
    response.headers["Cache-Control"] = "no-store"
    return response

"""Subscriptions: the paged list, the create / edit form with inline validation, the page
with status and charts, pause / resume and seek, resend one message and recover the DLQ
between two times."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.responses import Response

from control_plane.client import AdminClient, ApiError, NotAvailable, path, update_body
from control_plane.ui.charts import lines
from control_plane.ui.deps import OWNER, ApiDep, FormDep, Name, SessionDep, form_of
from control_plane.ui.forms import body_of, field_errors, values_of
from control_plane.ui.render import listed, open_by_name, posted, redirect, refused, render
from core.filters import FilterError, compile_filter
from core.model import Endpoint, RetryPolicy, SubscriptionSettings

router = APIRouter()


def _subs(project: str, *rest: str) -> str:
    return path("v1", "projects", project, "subscriptions", *rest)


@router.get("/ui/projects/{project}/subscriptions")
async def subscriptions(
    project: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    base = f"/ui/projects/{project}/subscriptions"
    wanted = await open_by_name(request, api, "subscription", _subs(project), base)
    if wanted.url:
        return redirect(request, wanted.url)
    shown = await listed(request, api, _subs(project), base, wanted.problem)
    return render(request, "subscriptions.html", session, project=project, **shown)


def _form(
    request: Request,
    session: Any,
    project: str,
    values: dict[str, str],
    errors: dict[str, str],
    editing: dict[str, Any] | None,
    status_code: int = 200,
) -> Response:
    return render(
        request,
        "sub_form.html",
        session,
        status_code=status_code,
        project=project,
        values=values,
        errors=errors,
        editing=editing,
    )


@router.get("/ui/projects/{project}/subscriptions/new", dependencies=[OWNER])
async def new(project: Name, request: Request, session: SessionDep, api: ApiDep) -> Response:
    await api.get(path("v1", "projects", project))
    # The model's own defaults, so the form never disagrees with the API.
    fields = SubscriptionSettings.model_fields
    defaults = {
        "endpoint": {
            "url": "",
            "method": "POST",
            "timeout_ms": Endpoint.model_fields["timeout_ms"].default,
        },
        "retry": RetryPolicy().model_dump(),
        "dlq_enabled": fields["dlq_enabled"].default,
        "max_in_flight": fields["max_in_flight"].default,
        "delay_ms": fields["delay_ms"].default,
        "delivery_format": fields["delivery_format"].default.value,
    }
    values = values_of(defaults) | {
        "topic": request.query_params.get("topic", ""),
        "start": "latest",
    }
    return _form(request, session, project, values, {}, None)


async def _submit(
    api: AdminClient, project: str, form: dict[str, str], current: dict[str, Any] | None
) -> tuple[dict[str, str], Any]:
    """Send the form to the API: ``({}, subscription)`` or ``(errors by field, None)``."""
    settings, problems = body_of(form, current or {})
    if problems:
        return problems, None
    try:
        if current is None:
            body = {
                **settings,
                "name": form.get("name", "").strip(),
                "topic": form.get("topic", "").strip(),
                "start": _start(form),
            }
            return {}, await api.post(_subs(project), body)
        return {}, await api.put(_subs(project, current["name"]), update_body(current, settings))
    except ApiError as exc:
        if exc.status not in (400, 409, 422):
            raise
        errors = field_errors(exc.field_problems()) if exc.status == 422 else {}
        return errors or {"form": exc.message}, None


def _start(form: dict[str, str]) -> str:
    """The create form's start: ``latest``, ``earliest`` or its time as RFC 3339."""
    chosen = form.get("start", "latest")
    if chosen == "time":
        return rfc3339(form.get("start_time", "")) or "time"  # empty: the API names it
    return chosen


@router.post("/ui/projects/{project}/subscriptions/new", dependencies=[OWNER])
async def create(
    project: Name, request: Request, session: SessionDep, form: FormDep, api: ApiDep
) -> Response:
    errors, created = await _submit(api, project, form, None)
    if created is None:
        return _form(request, session, project, form, errors, None, status_code=422)
    url = f"/ui/projects/{project}/subscriptions/{created['name']}"
    return redirect(request, url, f"created subscription {created['name']}")


@router.get("/ui/projects/{project}/subscriptions/{sub}/edit", dependencies=[OWNER])
async def edit(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    current = await api.get(_subs(project, sub))
    return _form(request, session, project, values_of(current), {}, current)


@router.post("/ui/projects/{project}/subscriptions/{sub}/edit", dependencies=[OWNER])
async def update(
    project: Name, sub: Name, request: Request, session: SessionDep, form: FormDep, api: ApiDep
) -> Response:
    current = await api.get(_subs(project, sub))
    errors, saved = await _submit(api, project, form, current)
    if saved is None:
        values = form | {"name": sub, "topic": current["topic"]}
        return _form(request, session, project, values, errors, current, status_code=422)
    return redirect(request, f"/ui/projects/{project}/subscriptions/{sub}", "saved")


RANGES = ("10m", "1h")  # the history a status page shows (the API's ``range``)


def _range(request: Request) -> str:
    wanted = request.query_params.get("range", "1h")
    return wanted if wanted in RANGES else "1h"


async def _status(
    api: AdminClient, project: str, sub: str, range_: str = "1h"
) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await api.get(_subs(project, sub, "status"), {"range": range_})
        return found
    except NotAvailable:
        return None


@router.get("/ui/projects/{project}/subscriptions/{sub}")
async def page(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    found = await api.get(_subs(project, sub))
    range_ = _range(request)
    status = await _status(api, project, sub, range_)
    lag = lines(status["history"], ("lag",)) if status else None
    return render(
        request,
        "subscription.html",
        session,
        project=project,
        sub=found,
        status=status,
        replay=await _latest_replay(api, project, sub),
        range=range_,
        ranges=RANGES,
        lag_chart=lag,
    )


@router.get("/ui/projects/{project}/subscriptions/{sub}/status.json")
async def status_json(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    """The status for the page's polling (the browser has a session, not the admin token)."""
    status = await _status(api, project, sub, _range(request))
    if status is None:
        return JSONResponse({"code": "not_available", "message": "status is not available"}, 404)
    return JSONResponse(status, headers={"Cache-Control": "no-store"})


@router.post("/ui/projects/{project}/subscriptions/{sub}/pause")
@router.post("/ui/projects/{project}/subscriptions/{sub}/resume")
async def pause_resume(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    await form_of(request, session)
    paused = request.url.path.endswith("/pause")
    await api.set_paused(project, sub, paused)
    back = f"/ui/projects/{project}/subscriptions/{sub}"
    return redirect(request, back, "paused" if paused else "resumed")


@router.post("/ui/projects/{project}/subscriptions/{sub}/enable")
async def enable(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    """Enable a subscription its failing endpoint disabled (``POST …/enable``)."""
    await form_of(request, session)
    await api.post(f"{path('v1', 'projects', project, 'subscriptions', sub)}/enable")
    return redirect(request, f"/ui/projects/{project}/subscriptions/{sub}", "enabled")


@router.post("/ui/projects/{project}/subscriptions/{sub}/test-event")
async def test_event(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    """Send a test event (``POST …/test-event``); the page shows the endpoint's answer."""
    await form_of(request, session)
    back = f"/ui/projects/{project}/subscriptions/{sub}"
    try:
        result = await api.post(_subs(project, sub, "test-event"))
    except NotAvailable:
        return redirect(request, back, "test events are not available here", "error")
    except ApiError as exc:
        if exc.status == 503:  # no worker holds it: say so on the page
            return redirect(request, back, f"test event not sent: {exc.message}", "error")
        return refused(request, back, exc, "test event not sent")
    return redirect(request, back, _tested(result), "info" if result.get("delivered") else "error")


def _tested(result: dict[str, Any]) -> str:
    """A test event's result as the page's one-line notice (the answer cut to 200 chars)."""
    status = result.get("status")
    said = f"HTTP {status}" if status is not None else str(result.get("error") or "no answer")
    verdict = "delivered" if result.get("delivered") else "failed"
    line = f"test event {verdict}: {said} in {result.get('latency_ms')} ms"
    answer = str(result.get("answer") or "")[:200]
    return f"{line}; answer: {answer}" if answer else line


def rfc3339(local: str) -> str:
    """A ``datetime-local`` input (``2026-01-31T12:00``, taken as UTC) as RFC 3339."""
    stamp = local.strip()
    if len(stamp) == 16:
        stamp += ":00"
    has_zone = stamp.endswith("Z") or "+" in stamp[10:] or "-" in stamp[10:]
    return stamp if has_zone or not stamp else f"{stamp}Z"


@router.post("/ui/projects/{project}/subscriptions/{sub}/seek")
async def seek(project: Name, sub: Name, request: Request, form: FormDep, api: ApiDep) -> Response:
    back = f"/ui/projects/{project}/subscriptions/{sub}"
    to = form.get("to", "")
    body: dict[str, str] = {"to": to} if to in ("earliest", "latest") else {}
    if to == "timestamp":
        body = {"timestamp": rfc3339(form.get("timestamp", ""))}
    if not body:
        return redirect(request, back, "choose earliest, latest or a time", "error")
    where = _subs(project, sub, "seek")
    moved = await posted(request, api, where, body, back=back, what="seek", failed="not moved")
    if isinstance(moved, Response):
        return moved
    at = ", ".join(f"p{k}@{v}" for k, v in sorted(moved.get("positions", {}).items()))
    return redirect(request, back, f"moved to segment {moved.get('segment')}: {at}")


@router.post("/ui/projects/{project}/subscriptions/{sub}/resend")
async def resend(
    project: Name, sub: Name, request: Request, form: FormDep, api: ApiDep
) -> Response:
    """Resend one message (``POST …/resend``), then show its trace: the subscription's state
    there is the resend's status (pending, delivering, delivered, filtered, …)."""
    back = f"/ui/projects/{project}/subscriptions/{sub}"
    mid = form.get("message_id", "").strip()
    if not mid:
        return redirect(request, back, "give the id of the message to resend", "error")
    where, body = _subs(project, sub, "resend"), {"message_id": mid}
    done = await posted(
        request, api, where, body, back=back, what="resend", failed=f"{mid} not resent"
    )
    if isinstance(done, Response):
        return done
    found = await api.get(_subs(project, sub))
    trace = f"/ui/projects/{found['topic_project']}/topics/{found['topic']}/messages/"
    note = (
        f"{mid} resent to {project}/{sub} only: its state below is the resend's status "
        "(the trace shows it within seconds; reload)"
    )
    return redirect(request, trace + quote(done["message_id"], safe=""), note)


@router.post("/ui/projects/{project}/subscriptions/{sub}/recover")
async def recover(
    project: Name, sub: Name, request: Request, form: FormDep, api: ApiDep
) -> Response:
    """Recover the DLQ entries that failed between two times (``POST …/recover``), up to
    10 000 at once; the notice says how many, and how many of the window are left."""
    back = f"/ui/projects/{project}/subscriptions/{sub}"
    since, until = form.get("since", "").strip(), form.get("until", "").strip()
    if not since or not until:
        return redirect(request, back, "give both times: failed since and until", "error")
    body = {"since": rfc3339(since), "until": rfc3339(until), "limit": 10_000}
    where = _subs(project, sub, "recover")
    done = await posted(
        request, api, where, body, back=back, what="recover", failed="nothing recovered"
    )
    if isinstance(done, Response):
        return done
    left = int(done.get("remaining", 0))
    more = f"; {left} more of the window remain: recover again" if left else ""
    window = f"{body['since']} and {body['until']}"
    line = f"recovered {done.get('recovered')} dead-lettered messages that failed between {window}"
    return redirect(request, back, line + more)


async def _latest_replay(api: AdminClient, project: str, sub: str) -> dict[str, Any] | None:
    """The subscription's latest window replay, or None (never replayed, or no such API)."""
    try:
        found: dict[str, Any] = await api.get(_subs(project, sub, "replay"))
        return found
    except (NotAvailable, ApiError):
        return None


@router.post("/ui/projects/{project}/subscriptions/{sub}/replay")
async def replay(
    project: Name, sub: Name, request: Request, form: FormDep, api: ApiDep
) -> Response:
    """Replay a window of the topic — the archive and storage — into this subscription only
    (``POST …/replay``); the page then shows its progress (docs/archive.md)."""
    back = f"/ui/projects/{project}/subscriptions/{sub}"
    since, until = form.get("since", "").strip(), form.get("until", "").strip()
    if not since or not until:
        return redirect(request, back, "give both times: accepted since and until", "error")
    rate = form.get("rate", "").strip() or "100"
    if not rate.isdigit():
        return redirect(request, back, "the rate is a whole number of messages a second", "error")
    body = {"since": rfc3339(since), "until": rfc3339(until), "rate": int(rate)}
    where = _subs(project, sub, "replay")
    started = await posted(
        request, api, where, body, back=back, what="replay", failed="nothing replayed"
    )
    if isinstance(started, Response):
        return started
    line = (
        f"replay {started.get('id')} of the messages accepted between {body['since']} and "
        f"{body['until']} started: its progress is below (reload)"
    )
    return redirect(request, back, line)


@router.get("/ui/filter-check")
async def filter_check(request: Request, session: SessionDep) -> Response:
    """Compile a filter as the API would, for the form's inline check while typing."""
    expression = request.query_params.get("expression", "")[:4096]
    try:
        compile_filter(expression or None)
    except FilterError as exc:
        return JSONResponse({"ok": False, "problem": exc.message})
    return JSONResponse({"ok": True})

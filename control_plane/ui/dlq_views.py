"""The DLQ browser: failed messages with why they failed; unsideline (replay) and purge,
the latter only after a confirmation page that says what will be deleted."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import AdminClient, ApiError, NotAvailable, path
from control_plane.ui.deps import ApiDep, FormListsDep, Name, SessionDep
from control_plane.ui.render import redirect, render
from control_plane.ui.trace_views import trace_url

router = APIRouter()
MAX_ROUNDS = 50  # unsideline / purge loop on "remaining", bounded per click
FILTERS = (
    "order",
    "limit",
    "cursor",
    "group",
    "status",
    "failed_after",
    "failed_before",
    "kind",
)


def _messages(project: str, sub: str, *rest: str) -> str:
    return path("v1", "projects", project, "subscriptions", sub, "dlq", "messages", *rest)


def _preview(message: dict[str, Any], size: int = 160) -> str:
    try:
        raw = base64.b64decode(message.get("payload_base64") or "")
    except ValueError:
        return "(undecodable)"
    text = raw[:size].decode("utf-8", errors="replace")
    return text + ("…" if len(raw) > size else "")


@router.get("/ui/projects/{project}/subscriptions/{sub}/dlq")
async def browse(
    project: Name, sub: Name, request: Request, session: SessionDep, api: ApiDep
) -> Response:
    """The DLQ's summary by error, then its entries: the failed heads first, the followers
    sidelined behind them after (unless a filter names one kind)."""
    params = {k: request.query_params.get(k) for k in FILTERS}
    params["limit"] = params["limit"] or "50"
    summary: dict[str, Any] | None = None
    try:
        summary = await api.get(_messages(project, sub, "summary"))
    except NotAvailable:
        summary = None
    chosen = params.get("kind")
    kinds = [chosen] if chosen in ("heads", "sidelined") else ["heads", "sidelined"]
    if summary is None and not chosen:
        kinds = [""]  # a control plane without kinds: everything in one list
    pages: list[dict[str, Any]] = []
    missing = None
    for kind in kinds:
        page, missing = await _page(api, project, sub, params | {"kind": kind})
        if missing:
            break
        if kind == "sidelined" and not chosen and not page["messages"]:
            continue
        pages.append({"kind": kind, **page})
    return render(
        request,
        "dlq.html",
        session,
        project=project,
        sub=sub,
        pages=pages,
        summary=summary,
        missing=missing,
        filters={k: v or "" for k, v in params.items()},
    )


async def _page(
    api: AdminClient, project: str, sub: str, params: dict[str, str | None]
) -> tuple[dict[str, Any], str | None]:
    """One page of entries (with previews and trace links), or why there is none."""
    empty: dict[str, Any] = {"messages": [], "next_cursor": None}
    try:
        page: dict[str, Any] = await api.get(_messages(project, sub), params)
    except NotAvailable:
        return empty, "The DLQ is not available on this control plane."
    except ApiError as exc:
        if exc.status != 422:
            raise
        return empty, exc.message
    for message in page["messages"]:
        message["preview"] = _preview(message)
        topic_project, _, topic = (message.get("topic") or "").partition("/")
        if topic and message.get("message_id"):
            message["trace_url"] = trace_url(topic_project, topic, message["message_id"])
    return page, None


def _selector(form: dict[str, list[str]]) -> tuple[str, list[tuple[str, Any]], str]:
    """What a DLQ form chose: (kind, query pairs for DELETE, words for people)."""
    one = {k: v[0] for k, v in form.items() if v}
    scope = one.get("scope", "selected")
    if scope == "selected" and form.get("message_id"):
        ids = form["message_id"]
        return "ids", [("message_id", i) for i in ids], f"{len(ids)} selected message(s)"
    if scope == "before" and one.get("failed_before"):
        before = one["failed_before"].strip()
        return "before", [("failed_before", before)], f"every message failed before {before}"
    if scope == "all":
        return "all", [("all", "true")], "every message in the DLQ"
    return "", [], ""


async def _done(
    request: Request, back: str, api: AdminClient, call: Any, key: str, words: str
) -> Response:
    """Run ``call`` until it has done all (:func:`_loop`), back to the page saying how many
    (``key`` of the API's answer: unsidelined, purged)."""
    try:
        done, remaining = await _loop(api, call, key)
    except NotAvailable:
        return redirect(request, back, "the DLQ is not available on this control plane", "error")
    return redirect(request, back, f"{key} {done} ({remaining} remaining) — {words}")


async def _loop(api: AdminClient, call: Any, key: str) -> tuple[int, int]:
    total, remaining = 0, 0
    for _ in range(MAX_ROUNDS):
        result = await call(api)
        total += int(result[key])
        remaining = int(result["remaining"])
        if remaining <= 0 or int(result[key]) <= 0:
            break
    return total, remaining


@router.post("/ui/projects/{project}/subscriptions/{sub}/dlq/unsideline")
async def unsideline(
    project: Name, sub: Name, request: Request, form: FormListsDep, api: ApiDep
) -> Response:
    back = f"/ui/projects/{project}/subscriptions/{sub}/dlq"
    kind, pairs, words = _selector(form)
    if kind not in ("ids", "before", "all"):
        return redirect(
            request,
            back,
            "select messages, or a time to replay everything failed before it",
            "error",
        )
    body: dict[str, Any] = {"message_ids": [v for _, v in pairs]} if kind == "ids" else {}
    if kind == "before":
        body = {"failed_before": pairs[0][1]}
    if kind == "all":  # the API replays by time: everything failed until now
        body = {"failed_before": datetime.now(UTC).isoformat().replace("+00:00", "Z")}

    async def call(client: AdminClient) -> Any:
        return await client.post(_messages(project, sub, "unsideline"), body)

    return await _done(request, back, api, call, "unsidelined", words)


@router.post("/ui/projects/{project}/subscriptions/{sub}/dlq/purge")
async def purge(
    project: Name, sub: Name, request: Request, session: SessionDep, form: FormListsDep, api: ApiDep
) -> Response:
    """First post: the confirmation page. Second post, with ``confirm=yes``: the purge."""
    back = f"/ui/projects/{project}/subscriptions/{sub}/dlq"
    kind, pairs, words = _selector(form)
    if not kind:
        return redirect(request, back, "select messages, a time, or everything to purge", "error")
    if form.get("confirm") != ["yes"]:
        return render(
            request,
            "dlq_confirm.html",
            session,
            project=project,
            sub=sub,
            words=words,
            form=[(k, v) for k, vs in form.items() if k not in ("csrf", "confirm") for v in vs],
        )

    async def call(client: AdminClient) -> Any:
        return await client.delete(_messages(project, sub), pairs)

    return await _done(request, back, api, call, "purged", words)

"""Rendering of the UI's pages: the Jinja2 environment, flash messages, redirects, paging."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Request
from fastapi.templating import Jinja2Templates
from starlette.responses import RedirectResponse, Response

from control_plane.client import JSON, AdminClient, ApiError, NotAvailable
from control_plane.ui import session as sessions
from core.names import MAX_NAME, NAME_INPUT_PATTERN, check_name
from core.principals import Need, Principal, PrincipalKind

HERE = Path(__file__).parent
# Scripts, styles and everything else only from this origin, never inline: a value that
# slipped through escaping still could not run. Pages are never framed (clickjacking).
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'"
)
templates = Jinja2Templates(directory=str(HERE / "templates"))
PAGE_SIZES = (20, 50, 100, 200)


_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)")


def _compact(value: Any, size: int = 120) -> str:
    """A cell of a table of unknown shape: scalars as they are, the rest as short JSON."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str) and _STAMP.fullmatch(value):
        return value[:19].replace("T", " ")  # RFC 3339 in UTC, to the second
    if isinstance(value, str | int | bool):
        return str(value)
    text = json.dumps(value, separators=(",", ":"), default=str)
    return text if len(text) <= size else text[: size - 1] + "…"


def _heading(column: str) -> str:
    """A column's heading: words, not identifiers (``latency_ms.p99`` → ``p99 ms``)."""
    head, dot, tail = column.partition(".")
    if dot and head.endswith("_ms"):
        return f"{tail} ms"
    return column.replace(".", " ").replace("_", " ")


templates.env.filters["compact"] = _compact
templates.env.filters["heading"] = _heading
templates.env.globals["name_pattern"] = NAME_INPUT_PATTERN
templates.env.globals["max_name"] = MAX_NAME


def _can(principal: Principal | None, need: str, project: str | None = None) -> bool:
    """What templates ask before they show a button: the API's own rule (the API refuses
    anyway; the page only hides what would be refused)."""
    return principal is not None and principal.may(Need(need), project)


def _who(principal: Principal | None) -> str:
    if principal is None:
        return ""
    if principal.is_admin and principal.kind is not PrincipalKind.USER:
        return "admin token"
    roles = "admin" if principal.is_admin else ", ".join(sorted(str(g) for g in principal.grants))
    return f"{principal.name} ({roles or 'no roles'})"


def render(
    request: Request,
    name: str,
    session: sessions.Session | None,
    status_code: int = 200,
    **context: Any,
) -> Response:
    """A page, with the session's CSRF token for its forms and the pending flash message
    (or ``flash=(message, kind)`` given here)."""
    given = context.pop("flash", None)
    flashed = sessions.take_flash(request)
    principal: Principal | None = getattr(request.state, "principal", None)
    context.update(
        csrf=session.csrf if session else "",
        flash=given or flashed,
        logged_in=bool(session),
        can=partial(_can, principal),
        who=_who(principal),
    )
    response = templates.TemplateResponse(request, name, context, status_code=status_code)
    if flashed:
        response.delete_cookie(sessions.FLASH_COOKIE, path=sessions.COOKIE_PATH)
    # Pages hold the session's CSRF token: never cache them, never frame them.
    response.headers["Cache-Control"] = "no-store"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = CSP
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "same-origin"
    return response


def confirmation(
    request: Request,
    session: sessions.Session,
    question: str,
    *,
    action: str,
    back: str,
    yes: str,
    fields: dict[str, str] | None = None,
) -> Response:
    """The page that asks ``question`` before a form that changes something is acted on:
    what a form with ``data-confirm`` answers when it arrives without ``confirm=yes`` (the
    browser did not ask: no script). Yes posts ``fields`` again to ``action``."""
    return render(
        request,
        "confirm.html",
        session,
        title=question.split("?")[0] + "?",
        question=question,
        action=action,
        back=back,
        yes=yes,
        fields=sorted((fields or {}).items()),
    )


def confirmed(form: dict[str, str]) -> bool:
    """Whether the person was asked (by the browser's dialog or the confirmation page)."""
    return form.get("confirm") == "yes"


def redirect(
    request: Request, url: str, message: str | None = None, kind: str = "info"
) -> Response:
    """303 to ``url`` (a GET), carrying ``message`` to the next page."""
    response = RedirectResponse(url, status_code=303)
    if message:
        sessions.flash(request, response, message, kind)
    return response


def refused(request: Request, back: str, exc: ApiError, what: str) -> Response:
    """Back to ``back`` with the API's refusal (``what: why``); a server error, or no answer
    at all, is raised on (the error page)."""
    if exc.status == 0 or exc.status >= 500:
        raise exc
    return redirect(request, back, f"{what}: {exc.message}", "error")


async def posted(
    request: Request, api: AdminClient, where: str, body: JSON, *, back: str, what: str, failed: str
) -> JSON | Response:
    """POST a form's ``body`` to ``where``: the API's answer, or the way back to ``back``
    saying why not — ``{what} is not available on this control plane``, or the refusal as
    ``{failed}: why`` (:func:`refused`). The caller returns a :class:`Response` as it is::

        moved = await posted(request, api, url, body, back=back, what="seek", failed="not moved")
        if isinstance(moved, Response):
            return moved
    """
    try:
        return await api.post(where, body)
    except NotAvailable:
        return redirect(request, back, f"{what} is not available on this control plane", "error")
    except ApiError as exc:
        return refused(request, back, exc, failed)


def paging(request: Request, default: int = 50) -> dict[str, Any]:
    """The API's list parameters of a list page, from its query string: ``q`` (the search
    box), ``cursor`` (the pager's links), ``limit`` (bounded), and ``offset`` only as an old
    bookmark carries it without a cursor."""
    query = request.query_params

    def number(name: str, fallback: int, low: int, high: int) -> int:
        try:
            return max(low, min(high, int(query.get(name, fallback))))
        except ValueError:
            return fallback

    params: dict[str, Any] = {"limit": number("limit", default, 1, 500)}
    if query.get("q", "").strip():
        params["q"] = query["q"].strip()[:200]
    if query.get("cursor"):
        params["cursor"] = query["cursor"][:200]
    elif "offset" in query:
        params["offset"] = number("offset", 0, 0, 1_000_000)
    return params


async def list_page(
    request: Request, api: AdminClient, where: str, params: dict[str, Any]
) -> tuple[Any, tuple[str, str] | None]:
    """A page of the list at ``where`` and a flash to show: a cursor the API refuses (an
    old or edited link) shows the first page instead, saying so."""
    try:
        return await api.get(where, params), None
    except ApiError as exc:
        if exc.status != 400 or "cursor" not in params:
            raise
    first = {k: v for k, v in params.items() if k != "cursor"}
    said = "That page link is not valid (any more): here is the first page."
    return await api.get(where, first), (said, "error")


async def listed(
    request: Request,
    api: AdminClient,
    where: str,
    base: str,
    problem: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """What every list page's template takes: ``page``, a page of the list at ``where`` for
    the request's search, cursor and size (:func:`paging`, :func:`list_page`); ``base``, the
    page's own URL; ``q``, the search; ``flash``, ``problem`` (the "open by name" box's) or
    else what an invalid cursor gave."""
    params = paging(request)
    page, invalid = await list_page(request, api, where, params)
    return {"page": page, "base": base, "q": params.get("q", ""), "flash": problem or invalid}


@dataclass(frozen=True)
class Opened:
    """What a list page's "open by name" box led to: the page to go to, or why not (the
    list is shown again with that said)."""

    url: str | None = None
    problem: tuple[str, str] | None = None


async def open_by_name(
    request: Request, api: AdminClient, what: str, api_base: str, ui_base: str
) -> Opened:
    """The ``what`` typed in the list's "open" box: its page if the API has it (asked at
    ``api_base``/name), else a message that says so; nothing typed, nothing to do."""
    name = request.query_params.get("open", "").strip()
    if not name:
        return Opened()
    try:
        check_name(name)
    except ValueError as exc:
        return Opened(problem=(str(exc), "error"))
    try:
        await api.get(f"{api_base}/{quote(name, safe='')}")
    except ApiError as exc:
        if exc.status not in (403, 404):  # 403: one the user may not see is not "found"
            raise
        return Opened(problem=(f"No {what} named {name} here.", "error"))
    return Opened(url=f"{ui_base}/{name}")


def _flat(row: dict[str, Any]) -> dict[str, Any]:
    """One level of nested objects as their own columns (``latency_ms.p99``)."""
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, dict) and value and len(value) <= 6:
            out.update({f"{key}.{k}": v for k, v in value.items()})
        else:
            out[key] = value
    return out


def table_of(
    value: Any, prefer: tuple[str, ...] = (), limit: int = 14
) -> tuple[list[str], list[dict[str, Any]]]:
    """Columns and rows of a JSON list of objects (or of the one list inside an object), for
    reports whose exact shape the page does not need to know. Columns named in ``prefer``
    come first, in that order; a new field still shows, after them."""
    if isinstance(value, dict):
        lists = [v for v in value.values() if isinstance(v, list)]
        value = lists[0] if len(lists) == 1 else [value]
    rows = [_flat(r) for r in value if isinstance(r, dict)] if isinstance(value, list) else []
    seen: list[str] = []
    for row in rows:
        seen += [k for k in row if k not in seen]
    columns = [c for c in prefer if c in seen] + [c for c in seen if c not in prefer]
    return columns[:limit], rows

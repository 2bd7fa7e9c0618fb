"""The users of the admin API and the UI, for admins: a page of them at a time by cursor,
searched on the server by name or role (``GET /v1/users`` with ``q``, ``cursor``,
``limit``); the CLI's ``httpbus user`` makes and changes them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from control_plane.client import path
from control_plane.ui.deps import ApiDep, SessionDep
from control_plane.ui.render import listed, render

router = APIRouter()


@router.get("/ui/users")
async def users(request: Request, session: SessionDep, api: ApiDep) -> Response:
    """The API answers 403 to a caller who is not an admin (the error page says so)."""
    shown = await listed(request, api, path("v1", "users"), "/ui/users")
    for user in shown["page"]["items"]:
        user["created"] = _when(user["created_at_ms"])
    return render(request, "users.html", session, **shown)


def _when(ms: Any) -> str:
    return datetime.fromtimestamp(int(ms) / 1000, UTC).strftime("%Y-%m-%d %H:%M")

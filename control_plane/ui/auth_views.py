"""Login and logout: the admin token, typed once, becomes a signed session cookie."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.responses import Response

from . import session as sessions
from .deps import SessionDep, form_of
from .render import redirect, render

router = APIRouter()


def _next(value: str | None) -> str:
    """Where to go after login: only a page of the UI (never another site)."""
    if value and value.startswith("/ui/") and not value.startswith("//"):
        return value
    return "/ui/projects"


@router.get("/ui/login")
async def login_form(request: Request) -> Response:
    nonce = sessions.new_login_nonce()
    target = _next(request.query_params.get("next"))
    response = render(request, "login.html", None, next=target, nonce=nonce)
    sessions.set_login_nonce(request, response, nonce)
    return response


@router.post("/ui/login")
async def login(request: Request) -> Response:
    form = await request.form()
    token, nonce = str(form.get("token", "")), str(form.get("nonce", ""))
    target = _next(str(form.get("next", "")))
    if not sessions.login_nonce_ok(request, nonce):
        return redirect(
            request, f"/ui/login?next={quote(target)}", "the login form expired; try again", "error"
        )
    if not sessions.signer(request).token_ok(token):
        return redirect(
            request, f"/ui/login?next={quote(target)}", "that is not the admin token", "error"
        )
    response = redirect(request, target)
    sessions.start_session(request, response)
    return response


@router.post("/ui/logout")
async def logout(request: Request, session: SessionDep) -> Response:
    await form_of(request, session)
    response = redirect(request, "/ui/login", "logged out")
    sessions.end_session(response)
    return response

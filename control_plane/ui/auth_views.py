"""Login and logout: a user's name and password (argon2id, ``reports.principals``) or the
admin token, typed once, becomes a signed session cookie naming who logged in."""

from __future__ import annotations

import math
from urllib.parse import quote

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from control_plane.ui import session as sessions
from control_plane.ui.deps import Authenticating, SessionDep, form_of
from control_plane.ui.render import redirect, render
from control_plane.ui.throttle import ADMIN_TOKEN_NAME, LoginThrottle

router = APIRouter()


def _next(value: str | None) -> str:
    """Where to go after login: only a page of the UI (never another site)."""
    if value and value.startswith("/ui/") and not value.startswith("//"):
        return value
    return "/ui/"  # the overview


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
    user, password = str(form.get("user", "")).strip()[:64], str(form.get("password", ""))
    target = _next(str(form.get("next", "")))
    throttle: LoginThrottle = request.app.state.ui_throttle
    # The TCP peer, or what a configured proxy says (http_server.forwarded_allow_ips).
    address = request.client.host if request.client else "unknown"
    name = user or ADMIN_TOKEN_NAME
    wait = throttle.retry_after(address, name)
    if wait > 0:
        return _too_many(request, target, wait)
    if not sessions.login_nonce_ok(request, nonce):
        return redirect(
            request, f"/ui/login?next={quote(target)}", "the login form expired; try again", "error"
        )
    stamp = ""
    if user:
        authenticator: Authenticating = request.app.state.authenticator
        found = await run_in_threadpool(authenticator.principals.login_session, user, password)
        if found is None:
            throttle.failed(address, name)
            message = "that user name and password do not match"
            return redirect(request, f"/ui/login?next={quote(target)}", message, "error")
        stamp = found[1]
    elif not sessions.signer(request).token_ok(token):
        throttle.failed(address, name)
        return redirect(
            request, f"/ui/login?next={quote(target)}", "that is not the admin token", "error"
        )
    throttle.succeeded(address, name)
    response = redirect(request, target)
    sessions.start_session(request, response, user or None, stamp)
    return response


def _too_many(request: Request, target: str, wait: float) -> Response:
    """The login form again, answered 429: these credentials failed too often just now."""
    seconds = math.ceil(wait)
    nonce = sessions.new_login_nonce()
    message = f"too many failed logins; try again in {seconds} s"
    response = render(
        request, "login.html", None, 429, next=target, nonce=nonce, flash=(message, "error")
    )
    sessions.set_login_nonce(request, response, nonce)
    response.headers["Retry-After"] = str(seconds)
    return response


@router.post("/ui/logout")
async def logout(request: Request, session: SessionDep) -> Response:
    await form_of(request, session)
    response = redirect(request, "/ui/login", "logged out")
    await sessions.end_session(request, response, session)
    return response

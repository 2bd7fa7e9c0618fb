"""The caller known before a byte of a request's body is read, and no body over the cap.

FastAPI reads a route's body before its dependencies run, so the admin API's check of the
caller came after the body: 100 MB sent without a credential were read whole (200 MB of
memory) before the 401, and the UI's login form was read whole too. :class:`RequestGuard`
stands in front of the whole control plane (API and UI) as a pure ASGI middleware and, for
every request that carries a body (a ``Content-Length`` other than 0, or a
``Transfer-Encoding``):

- resolves the caller from its headers and cookies with the routes' own
  :class:`~control_plane.api.auth.Authenticator` (which keeps the answer for the routes) and
  refuses one that is not known without reading the body: 401, or for a UI page the answer
  its login check gives (a redirect to the login form). The login form itself is the one
  route a caller without credentials may post to (that is how they become known); its body
  is capped at :data:`LOGIN_BODY_BYTES`;
- refuses a body over the cap (``max_body_bytes``, setting of the control plane) with 413
  ``too_large``: at once when its ``Content-Length`` says so, else as the bytes arrive (a
  chunked body, or a ``Content-Length`` that lies), reading no further.

Every refusal answers ``Connection: close``, so the server stops reading what the client
still sends rather than reading it to drop it.

Example::

    app.add_middleware(RequestGuard, max_body_bytes=1024 * 1024, refuse_page=ui.login_answer)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import Request
from fastapi.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from control_plane.api.auth import Authenticator
from core import http_errors
from core.errors import HttpbusError, TooLarge, Unauthorized

LOGIN_PATH = "/ui/login"
LOGIN_BODY_BYTES = 16 * 1024  # a token, a user name, a password, a nonce and a page

Message = MutableMapping[str, Any]
# What a UI page answers a caller without a session (the UI's own login check).
PageRefusal = Callable[[Request], Awaitable[Response]]


class RequestGuard:
    """The middleware (see the module's docstring)."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int, refuse_page: PageRefusal) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.refuse_page = refuse_page

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        login = scope["path"] == LOGIN_PATH
        limit = LOGIN_BODY_BYTES if login else self.max_body_bytes
        refusal = None if login else await self._unknown_caller(scope)
        if refusal is None:
            declared = _declared_size(scope)
            if declared is not None and declared > limit:
                refusal = _error(_too_large(limit, declared))
        if refusal is not None:
            refusal.headers["Connection"] = "close"
            await refusal(scope, receive, send)
            return
        await _Capped(self.app, scope, limit, receive, send).run()

    async def _unknown_caller(self, scope: Scope) -> Response | None:
        """The answer to a caller none of the credentials it sent stands for, else None."""
        request = Request(scope)  # headers and cookies only: no receive, no body
        authenticator: Authenticator = request.app.state.authenticator
        try:
            await authenticator.resolve(request)
        except Unauthorized as exc:
            if scope["path"].startswith("/ui/"):
                return await self.refuse_page(request)
            return _error(exc)
        return None


class _Capped:
    """One request passed on with its body counted as it arrives: past ``limit`` the client
    is answered 413 here (unless the application answered already), the application is told
    the client left, and whatever it answers after is dropped."""

    def __init__(
        self, app: ASGIApp, scope: Scope, limit: int, receive: Receive, send: Send
    ) -> None:
        self.app, self.scope, self.limit = app, scope, limit
        self._receive, self._send = receive, send
        self.size = 0
        self.started = self.refused = False

    async def run(self) -> None:
        try:
            await self.app(self.scope, self.receive, self.send)
        except Exception:
            if not self.refused:  # the application's own failure
                raise
            # else: the body the application was reading was cut off here, and answered

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] == "http.request":
            self.size += len(message.get("body", b""))
            if self.size > self.limit:
                self.refused = True
                if not self.started:
                    answer = _error(_too_large(self.limit, None))
                    answer.headers["Connection"] = "close"
                    await answer(self.scope, self._receive, self._send)
                return {"type": "http.disconnect"}
        return message

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        if message["type"] == "http.response.start":
            self.started = True
        await self._send(message)


def _has_body(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0"):
            return True
    return False


def _declared_size(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            text = value.strip()
            return int(text) if text.isdigit() and len(text) < 20 else None
    return None


def _too_large(limit: int, declared: int | None) -> TooLarge:
    has = f"{declared} bytes" if declared is not None else f"more than {limit} bytes"
    return TooLarge(f"the body has {has}; at most {limit} are taken here")


def _error(exc: HttpbusError) -> Response:
    status, headers, body = http_errors.render(exc)
    return Response(body, status, headers, media_type="application/json")

"""Login sessions and CSRF protection of the web UI.

The session is a cookie the browser cannot read (HttpOnly), never sends from another site
(SameSite=Strict) and nobody can forge: a JSON payload signed with HMAC-SHA256 under a key
derived from the admin token, so rotating the admin token ends every session. The payload
holds the session's id, its expiry and its CSRF token, which every form posts back; a user's
session also holds the user's stamp (``reports.principals``), so deleting the user or changing
their password ends it. Logging
out revokes the id on the server (:mod:`.revocation`), so a copied cookie dies with it. The
login form, shown before any session exists, is protected by a signed nonce cookie it must
echo (double submit). Cookies are ``Secure`` when the request came over https or the control
plane's ``public_url`` is https (TLS ended by a proxy in front).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from starlette.responses import Response

from control_plane.ui.revocation import RevokedSessions
from core.principals import SessionClaim

SESSION_COOKIE = "httpbus_session"
LOGIN_COOKIE = "httpbus_login"
FLASH_COOKIE = "httpbus_flash"
COOKIE_PATH = "/ui"
SESSION_SECONDS = 8 * 3600


class LoginRequired(Exception):
    """No valid session: pages redirect to the login form, JSON answers 401."""


class CsrfRejected(Exception):
    """A form came without the session's CSRF token (or with another one)."""


@dataclass(frozen=True)
class Session:
    sid: str
    csrf: str
    expires: int
    user: str | None = None  # None: logged in with the admin token
    stamp: str = ""  # the user's credential stamp at login (reports.principals)


def _same(given: str, expected: str) -> bool:
    """Constant-time equality of two texts; ``hmac.compare_digest`` raises ``TypeError`` on a
    str beyond ASCII, which anyone can send, so bytes are compared."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class Signer:
    """Signs and verifies the cookies' payloads with a key derived from the admin token."""

    def __init__(self, admin_token: str) -> None:
        self.admin_token = admin_token.encode()
        self._key = hmac.new(self.admin_token, b"httpbus-ui-cookie-v1", hashlib.sha256).digest()

    def token_ok(self, given: str) -> bool:
        """Constant-time check of a token typed into the login form."""
        return hmac.compare_digest(given.strip().encode(), self.admin_token)

    def sign(self, payload: dict[str, Any]) -> str:
        body = _b64(json.dumps(payload, separators=(",", ":")).encode())
        mac = _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())
        return f"{body}.{mac}"

    def verify(self, value: str | None) -> dict[str, Any] | None:
        if not value or "." not in value:
            return None
        body, _, mac = value.partition(".")
        expected = _b64(hmac.new(self._key, body.encode(), hashlib.sha256).digest())
        if not _same(mac, expected):
            return None
        try:
            payload = json.loads(_unb64(body))
        except ValueError:
            return None
        return payload if isinstance(payload, dict) else None


def _set(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https"
        or bool(getattr(request.app.state, "ui_secure", False)),
    )


def signer(request: Request) -> Signer:
    found: Signer = request.app.state.ui_signer
    return found


def revoked(request: Request) -> RevokedSessions:
    found: RevokedSessions = request.app.state.ui_revoked
    return found


def current_session(request: Request) -> Session | None:
    payload = signer(request).verify(request.cookies.get(SESSION_COOKIE))
    if payload is None or payload.get("kind") != "session":
        return None
    expires, sid = payload.get("exp", 0), payload.get("sid")
    if not isinstance(expires, int) or expires < time.time() or not isinstance(sid, str):
        return None
    if sid in revoked(request):
        return None
    user, stamp = payload.get("user"), payload.get("stamp")
    if user is not None and (not isinstance(user, str) or not isinstance(stamp, str)):
        return None  # a user's session from before stamps: log in again
    return Session(
        sid=sid,
        csrf=str(payload.get("csrf", "")),
        expires=expires,
        user=user,
        stamp=stamp if isinstance(stamp, str) else "",
    )


def session_identity(request: Request) -> SessionClaim | None:
    """Who the session cookie of ``request`` stands for, for the admin API's authenticator
    (which checks a user's stamp against the user now)."""
    if getattr(request.app.state, "ui_signer", None) is None:
        return None
    session = current_session(request)
    if session is None:
        return None
    return SessionClaim(session.user, session.stamp)


def require_session(request: Request) -> Session:
    """The dependency of every page but the login form."""
    session = current_session(request)
    if session is None:
        raise LoginRequired()
    return session


def start_session(
    request: Request, response: Response, user: str | None = None, stamp: str = ""
) -> None:
    """A session of ``user`` with their credential ``stamp`` (None: of the admin token)."""
    expires = int(time.time()) + SESSION_SECONDS
    sid = secrets.token_hex(16)
    payload: dict[str, Any] = {
        "kind": "session",
        "sid": sid,
        "exp": expires,
        "csrf": secrets.token_urlsafe(24),
    }
    if user is not None:
        payload["user"] = user
        payload["stamp"] = stamp
    _set(request, response, SESSION_COOKIE, signer(request).sign(payload), SESSION_SECONDS)
    response.delete_cookie(LOGIN_COOKIE, path=COOKIE_PATH)


async def end_session(request: Request, response: Response, session: Session) -> None:
    """Revoke ``session`` on the server (every process) and delete its cookie."""
    await revoked(request).revoke(session.sid, session.expires)
    response.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH)


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)


def set_login_nonce(request: Request, response: Response, nonce: str) -> None:
    """The login form's nonce as a signed cookie the posted form must match."""
    _set(request, response, LOGIN_COOKIE, signer(request).sign({"kind": "login", "n": nonce}), 900)


def login_nonce_ok(request: Request, given: str) -> bool:
    payload = signer(request).verify(request.cookies.get(LOGIN_COOKIE))
    if payload is None or payload.get("kind") != "login":
        return False
    return _same(str(payload.get("n", "")), given)


def check_csrf(session: Session, given: object) -> None:
    if not isinstance(given, str) or not _same(given, session.csrf):
        raise CsrfRejected()


def flash(request: Request, response: Response, message: str, kind: str = "info") -> None:
    """A message for the next page (after a redirect), signed so it cannot be injected."""
    value = signer(request).sign({"kind": "flash", "m": message[:500], "k": kind})
    _set(request, response, FLASH_COOKIE, value, 60)


def take_flash(request: Request) -> tuple[str, str] | None:
    payload = signer(request).verify(request.cookies.get(FLASH_COOKIE))
    if payload is None or payload.get("kind") != "flash":
        return None
    return str(payload.get("m", "")), str(payload.get("k", "info"))

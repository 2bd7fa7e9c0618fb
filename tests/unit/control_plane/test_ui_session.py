"""The UI's session: signed cookies that expire, die with the admin token, and a login form
that cannot be posted from elsewhere or send the browser to another site."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

import httpx
import pytest

from control_plane import ui
from control_plane.ui.session import SESSION_COOKIE, Signer
from tests.support.contract_api import bare_app
from tests.support.ui_pages import TOKEN, hidden, login


async def _client(token: str = TOKEN) -> AsyncIterator[httpx.AsyncClient]:
    app = bare_app()
    ui.install(app, token, ["embedded"], "embedded")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async for c in _client():
        yield c


def test_signatures_depend_on_the_admin_token() -> None:
    payload = {"kind": "session", "exp": int(time.time()) + 60, "csrf": "x"}
    cookie = Signer(TOKEN).sign(payload)
    assert Signer(TOKEN).verify(cookie) == payload
    assert Signer(TOKEN + "-rotated").verify(cookie) is None
    assert Signer(TOKEN).verify(cookie.replace(".", ".x", 1)) is None
    assert Signer(TOKEN).verify("garbage") is None


async def test_an_expired_or_foreign_session_is_no_session(client: httpx.AsyncClient) -> None:
    expired = Signer(TOKEN).sign({"kind": "session", "exp": int(time.time()) - 1, "csrf": "x"})
    client.cookies.set(SESSION_COOKIE, expired, path="/ui")
    assert (await client.get("/ui/audit")).status_code == 303
    foreign = Signer("another-admin-token-0000").sign(
        {"kind": "session", "exp": int(time.time()) + 600, "csrf": "x"}
    )
    client.cookies.set(SESSION_COOKIE, foreign, path="/ui")
    assert (await client.get("/ui/audit")).status_code == 303
    # A flash cookie is signed too: it cannot pass for a session.
    flash = Signer(TOKEN).sign({"kind": "flash", "m": "hi", "k": "info"})
    client.cookies.set(SESSION_COOKIE, flash, path="/ui")
    assert (await client.get("/ui/audit")).status_code == 303


async def test_login_needs_the_form_nonce_and_never_leaves_the_ui(
    client: httpx.AsyncClient,
) -> None:
    # Posted without having loaded the form (another site's form): refused.
    r = await client.post("/ui/login", data={"token": TOKEN, "nonce": "guess", "next": "/ui/audit"})
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    assert SESSION_COOKIE not in client.cookies
    page = await client.get("/ui/login", params={"next": "https://evil.example/"})
    assert hidden(page.text, "next") == "/ui/projects"
    r = await client.post(
        "/ui/login",
        data={"token": TOKEN, "nonce": hidden(page.text, "nonce"), "next": "//evil.example/x"},
    )
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects"


async def test_logout_ends_the_session(client: httpx.AsyncClient) -> None:
    await login(client)
    page = await client.get("/ui/audit")
    assert page.status_code == 200
    r = await client.post("/ui/logout", data={"csrf": hidden(page.text, "csrf")})
    assert r.status_code == 303
    assert (await client.get("/ui/audit")).status_code == 303
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"

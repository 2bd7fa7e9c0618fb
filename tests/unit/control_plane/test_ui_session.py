"""The UI's session: signed cookies that expire, die with the admin token, and a login form
that cannot be posted from elsewhere or send the browser to another site."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from control_plane import ui
from control_plane.ui.revocation import RevokedSessions
from control_plane.ui.session import SESSION_COOKIE, Signer
from control_plane.ui.throttle import LoginThrottle
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from tests.support.contract_api import bare_app
from tests.support.ui_pages import TOKEN, hidden, login
from tests.support.until import until


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
    assert hidden(page.text, "next") == "/ui/"  # the overview, the home page
    r = await client.post(
        "/ui/login",
        data={"token": TOKEN, "nonce": hidden(page.text, "nonce"), "next": "//evil.example/x"},
    )
    assert r.status_code == 303 and r.headers["location"] == "/ui/"


async def test_logout_ends_the_session(client: httpx.AsyncClient) -> None:
    await login(client)
    page = await client.get("/ui/audit")
    assert page.status_code == 200
    r = await client.post("/ui/logout", data={"csrf": hidden(page.text, "csrf")})
    assert r.status_code == 303
    assert (await client.get("/ui/audit")).status_code == 303
    assert page.headers["cache-control"] == "no-store" and page.headers["x-frame-options"] == "DENY"


async def test_logout_revokes_the_session_on_the_server(client: httpx.AsyncClient) -> None:
    """A copy of the cookie taken before the logout is dead too (it was valid for 8 h)."""
    await login(client)
    copied = client.cookies.get(SESSION_COOKIE, path="/ui")
    page = await client.get("/ui/audit")
    await client.post("/ui/logout", data={"csrf": hidden(page.text, "csrf")})
    client.cookies.set(SESSION_COOKIE, copied or "", path="/ui")
    assert (await client.get("/ui/audit")).status_code == 303


async def test_logouts_reach_every_process_through_the_metastore(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "meta.db"), poll_interval_s=0.05) as meta:
        here, there = RevokedSessions(), RevokedSessions()
        await here.attach(meta)
        await there.attach(meta)
        try:
            await here.revoke("a1b2", int(time.time()) + 600)
            assert "a1b2" in here
            await until(lambda: "a1b2" in there, 5, "the other process sees the logout")
            # A revocation past its expiry is pruned: its cookie is dead anyway.
            expired = paths.revoked_session(int(time.time()) - 5, "old1")
            await meta.create(expired, b"")

            async def pruned() -> bool:
                return expired.rsplit("/", 1)[1] not in await meta.children(paths.REVOKED_SESSIONS)

            await until(pruned, 5, "the expired revocation deleted from the metastore")
            assert "old1" not in there
        finally:
            await here.aclose()
            await there.aclose()


async def test_wrong_tokens_from_one_address_are_throttled(client: httpx.AsyncClient) -> None:
    for _ in range(5):
        r = await login(client, token="wrong-token-000000000000")
        assert r.status_code == 303
    r = await login(client)  # the admin token from this address waits now, even the right one
    assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 60
    assert "too many failed logins" in r.text
    assert SESSION_COOKIE not in client.cookies


def test_the_throttle_forgets_old_failures_and_bounds_its_memory() -> None:
    now = [0.0]
    throttle = LoginThrottle(max_failures=2, window_s=10, max_entries=9, clock=lambda: now[0])
    throttle.failed("a", "ada")
    throttle.failed("a", "ada")
    assert throttle.retry_after("a", "ada") == 10
    now[0] = 10.5
    assert throttle.retry_after("a", "ada") == 0
    for address in "bcde":  # three counters a failure: past nine, the oldest go
        throttle.failed(address, "ada" + address)
    assert len(throttle._failures) == 9
    throttle.failed("e", "ada")
    throttle.succeeded("e", "ada")
    assert throttle.retry_after("e", "ada") == 0


async def test_every_page_has_a_strict_content_security_policy(client: httpx.AsyncClient) -> None:
    before = await client.get("/ui/login")
    await login(client)
    for page in (before, await client.get("/ui/audit")):
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "<script>" not in page.text and "javascript:" not in page.text


async def test_cookies_are_secure_behind_a_tls_proxy() -> None:
    app = bare_app()
    ui.install(app, TOKEN, ["embedded"], "embedded", public_url="https://bus.example.com")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
        page = await c.get("/ui/login")
        assert "secure" in page.headers["set-cookie"].lower()

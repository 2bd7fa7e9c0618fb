"""A UI session is bound to the user it was made for (issue 38): deleting the user, or
changing their password, ends the sessions of before, even when a user of the same name
(and the same password) is made again; a new login works at once."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from control_plane.ui.session import SESSION_COOKIE, Signer
from tests.support.control_plane import AUTH, TOKEN, ControlPlane, browser_control_plane
from tests.support.ui_pages import hidden

PASSWORD = "right-password-1"


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with browser_control_plane(tmp_path, {"ada": (PASSWORD, ["admin"])}) as built:
        yield built


async def _create(client: httpx.AsyncClient, name: str, password: str = PASSWORD) -> None:
    body = {"name": name, "password": password, "roles": ["admin"]}
    r = await client.post("/v1/users", json=body, headers=AUTH)
    assert r.status_code == 201, r.text


async def _login(client: httpx.AsyncClient, user: str, password: str = PASSWORD) -> str:
    """Log in as ``user``; the session cookie's value."""
    client.cookies.clear()
    page = await client.get("/ui/login")
    form = {"user": user, "password": password, "nonce": hidden(page.text, "nonce")}
    r = await client.post("/ui/login", data={**form, "next": "/ui/projects"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects", r.text
    return str(client.cookies[SESSION_COOKIE])


async def _me(client: httpx.AsyncClient, cookie: str) -> httpx.Response:
    """The admin API called with only the session cookie, as the UI calls it."""
    return await client.get("/v1/me", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})


async def _page_open(client: httpx.AsyncClient, cookie: str) -> bool:
    client.cookies.clear()
    r = await client.get("/ui/projects", headers={"Cookie": f"{SESSION_COOKIE}={cookie}"})
    return r.status_code == 200


async def test_a_deleted_users_session_does_not_work_for_a_new_user_of_the_name(
    cp: ControlPlane,
) -> None:
    old = await _login(cp.client, "ada")
    assert (await _me(cp.client, old)).json()["name"] == "ada"
    assert await _page_open(cp.client, old)
    assert (await cp.client.delete("/v1/users/ada", headers=AUTH)).status_code == 204
    await _create(cp.client, "ada")  # the same name, even the same password
    r = await _me(cp.client, old)
    assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
    assert "log in again" in r.json()["message"]
    assert not await _page_open(cp.client, old)
    new = await _login(cp.client, "ada")
    assert (await _me(cp.client, new)).status_code == 200


async def test_a_password_change_ends_the_sessions_of_before(cp: ControlPlane) -> None:
    first = await _login(cp.client, "ada")
    second = await _login(cp.client, "ada")  # another browser
    r = await cp.client.put(
        "/v1/users/ada/password", json={"password": "new-password-2"}, headers=AUTH
    )
    assert r.status_code == 204, r.text
    for cookie in (first, second):
        assert (await _me(cp.client, cookie)).status_code == 401
        assert not await _page_open(cp.client, cookie)
    after = await _login(cp.client, "ada", "new-password-2")
    assert (await _me(cp.client, after)).json()["name"] == "ada"


async def test_a_users_session_without_a_stamp_is_no_session(cp: ControlPlane) -> None:
    """A cookie signed before sessions carried a stamp: its user logs in again."""
    payload = {"kind": "session", "sid": "s" * 32, "exp": int(time.time()) + 600, "csrf": "c"}
    unstamped = Signer(TOKEN).sign({**payload, "user": "ada"})
    assert (await _me(cp.client, unstamped)).status_code == 401
    assert not await _page_open(cp.client, unstamped)
    admin = Signer(TOKEN).sign(payload)  # the admin token's session has no user to bind
    assert (await _me(cp.client, admin)).json()["kind"] == "admin-token"

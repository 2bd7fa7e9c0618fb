"""A login throttle that cannot lock others out (issue 38, item 5): failures count per
address and name, per name and per address; the right login of another name, or the admin
token, is not stopped by one name's failures; and ``X-Forwarded-For`` is believed only from
a configured proxy, so a client that rotates it does not escape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from control_plane.ui.session import SESSION_COOKIE
from control_plane.ui.throttle import LoginThrottle
from core.http_server import HttpServerLimits, uvicorn_options
from tests.support.control_plane import (
    TOKEN,
    ControlPlane,
    browser_control_plane,
    embedded_control_plane,
)
from tests.support.ui_pages import hidden, login
from tests.support.uvicorn_thread import uvicorn_thread

PASSWORD = "right-password-1"


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    users = {name: (PASSWORD, ["admin"]) for name in ("ada", "bob")}
    async with browser_control_plane(tmp_path, users) as built:
        yield built


async def _user_login(client: httpx.AsyncClient, user: str, password: str) -> httpx.Response:
    page = await client.get("/ui/login")
    form = {"user": user, "password": password, "nonce": hidden(page.text, "nonce")}
    return await client.post("/ui/login", data={**form, "next": "/ui/projects"})


def _logged_in(r: httpx.Response) -> bool:
    return r.status_code == 303 and r.headers["location"] == "/ui/projects"


async def test_five_bad_logins_from_one_address_do_not_stop_a_right_login(
    cp: ControlPlane,
) -> None:
    browser = cp.client
    for _ in range(5):
        r = await _user_login(browser, "ada", "wrong-password")
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    # The name that failed waits, even with its right password (that is the throttle) ...
    r = await _user_login(browser, "ada", PASSWORD)
    assert r.status_code == 429 and 0 < int(r.headers["retry-after"]) <= 60
    # ... and nobody else from the same address does: another user, the admin token.
    assert _logged_in(await _user_login(browser, "bob", PASSWORD))
    assert SESSION_COOKIE in browser.cookies
    browser.cookies.clear()
    assert _logged_in(await login(browser))


async def test_one_name_tried_from_many_addresses_waits_too(tmp_path: Path) -> None:
    """Per name, from any address: past ``max_user_failures`` the name waits everywhere."""
    async with embedded_control_plane(
        tmp_path, admin=False, database_url=f"sqlite:///{tmp_path / 'reports.db'}"
    ) as cp:
        assert cp.app is not None
        throttle: LoginThrottle = cp.app.state.ui_throttle
        for n in range(throttle.max_user_failures):
            throttle.failed(f"10.0.0.{n}", "ada")
        assert throttle.retry_after("10.9.9.9", "ada") > 0
        assert throttle.retry_after("10.9.9.9", "bob") == 0


def test_an_address_trying_name_after_name_waits() -> None:
    now = [0.0]
    throttle = LoginThrottle(clock=lambda: now[0])
    for n in range(throttle.max_address_failures):
        throttle.failed("10.0.0.1", f"user{n}")
    assert throttle.retry_after("10.0.0.1", "someone-else") == 60
    assert throttle.retry_after("10.0.0.2", "someone-else") == 0
    now[0] = 61
    assert throttle.retry_after("10.0.0.1", "someone-else") == 0


def test_proxy_headers_are_off_unless_proxies_are_configured() -> None:
    assert uvicorn_options(HttpServerLimits())["proxy_headers"] is False
    trusted = uvicorn_options(HttpServerLimits(forwarded_allow_ips=["10.1.0.0/16"]))
    assert trusted["proxy_headers"] is True
    assert trusted["forwarded_allow_ips"] == ["10.1.0.0/16"]


@pytest.mark.parametrize(("proxies", "escapes"), [([], False), (["127.0.0.1"], True)])
def test_rotating_x_forwarded_for_escapes_only_through_a_configured_proxy(
    tmp_path: Path, proxies: list[str], escapes: bool
) -> None:
    """A real uvicorn with the control plane's options: the test's client (127.0.0.1) sends
    a new X-Forwarded-For with each wrong admin token. Not a configured proxy: the sixth
    login waits. Configured as the proxy: each forwarded address counts on its own."""
    settings = ControlPlaneSettings(
        admin_token=TOKEN, database_url=f"sqlite:///{tmp_path / 'reports.db'}"
    )
    limits = HttpServerLimits(forwarded_allow_ips=proxies)
    with uvicorn_thread(create_app(settings), **uvicorn_options(limits)) as port:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}") as browser:
            for n in range(5):
                r = _login_as(browser, "wrong-token-000000000000", f"203.0.113.{n}")
                assert r.status_code == 303, r.text
            r = _login_as(browser, TOKEN, "203.0.113.99")
    assert (r.status_code == 303) is escapes, r.status_code
    assert (r.status_code == 429) is not escapes


def _login_as(browser: httpx.Client, token: str, forwarded_for: str) -> httpx.Response:
    headers = {"X-Forwarded-For": forwarded_for}
    page = browser.get("/ui/login", headers=headers)
    form = {"token": token, "nonce": hidden(page.text, "nonce"), "next": "/ui/projects"}
    return browser.post("/ui/login", data=form, headers=headers)

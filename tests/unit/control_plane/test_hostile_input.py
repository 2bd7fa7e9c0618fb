"""Hostile input to the control plane (issue 17, part A): a clear 4xx, never a 500."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from control_plane import ui
from control_plane.ui.session import LOGIN_COOKIE, SESSION_COOKIE
from tests.support.contract_api import bare_app
from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane
from tests.support.ui_pages import TOKEN, hidden, login

SUB = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(
        tmp_path, database_url=f"sqlite:///{tmp_path / 'reports.db'}"
    ) as found:
        yield found


@pytest.fixture
async def browser() -> AsyncIterator[httpx.AsyncClient]:
    app = bare_app()
    ui.install(app, TOKEN, ["embedded"], "embedded")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


@pytest.mark.parametrize(
    "secret",
    [
        "whsec_" + "!" * 30,  # not base64
        "whsec_" + "é" * 30,  # not even ASCII
        "whsec_" + "QUFB" * 6 + "A",  # base64 with a broken end
        "whsec_" + "=" * 24,  # no key at all
        "QUFB" * 8,  # a key, but no whsec_ (issue 38)
        "whsec_" + "AAAA" * 8,  # 24 zero bytes
        "whsec_" + "A" * 43 + "=",  # 32 zero bytes
    ],
)
async def test_a_signing_secret_that_does_not_decode_is_422(cp: ControlPlane, secret: str) -> None:
    await create_shop(cp.client)
    r = await cp.client.post(
        "/v1/projects/shop/subscriptions", json={**SUB, "signing_secret": secret}
    )
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed"), r.text
    assert r.json()["details"]["fields"][0]["field"] == "signing_secret"
    assert "base64" in r.json()["message"] or "key" in r.json()["message"]
    assert (await cp.client.get("/v1/projects/shop/subscriptions/s1")).status_code == 404
    good = {**SUB, "signing_secret": "whsec_" + "QUFB" * 8}
    assert (await cp.client.post("/v1/projects/shop/subscriptions", json=good)).status_code == 201


@pytest.mark.parametrize("run_id", [str(2**63), str(2**64 + 5), "9" * 400, "-1"])
async def test_an_audit_run_id_out_of_range_is_422(cp: ControlPlane, run_id: str) -> None:
    r = await cp.client.get(f"/v1/audit/runs/{run_id}")
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed"), r.text
    assert "run_id" in r.json()["message"]


async def test_an_audit_run_id_in_range_but_absent_is_404(cp: ControlPlane) -> None:
    r = await cp.client.get(f"/v1/audit/runs/{2**63 - 1}")
    assert r.status_code in (404, 503), r.text  # 503 only if the report database is not ready


async def test_a_non_ascii_csrf_value_is_refused_not_a_500(browser: httpx.AsyncClient) -> None:
    await login(browser)
    r = await browser.post("/ui/logout", data={"csrf": "é☃"})
    assert r.status_code in (303, 403), r.text
    assert (await browser.get("/ui/audit")).status_code == 200  # still logged in


async def test_a_non_ascii_cookie_mac_is_no_session(browser: httpx.AsyncClient) -> None:
    cookie = f"{SESSION_COOKIE}=eyJ9.".encode() + "é☃".encode()
    r = await browser.get("/ui/audit", headers={"cookie": cookie})
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")


async def test_a_non_ascii_login_nonce_is_refused_not_a_500(browser: httpx.AsyncClient) -> None:
    page = await browser.get("/ui/login")
    assert LOGIN_COOKIE in browser.cookies and hidden(page.text, "nonce")
    r = await browser.post(
        "/ui/login", data={"token": TOKEN, "nonce": "é☃", "next": "/ui/projects"}
    )
    assert r.status_code == 303 and r.headers["location"].startswith("/ui/login")
    assert SESSION_COOKIE not in browser.cookies

"""Endpoint credentials are write-only (issue 38, item 3): a viewer's walk over every GET
route of the API and every page of the UI finds none of a subscription's stored secrets;
every role reads the credential headers masked; an edit that sends the masked value back
keeps the stored one; only the admin's audited ``secret:reveal`` shows them."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from control_plane import ui
from core.secret_headers import MASK, is_secret, masked, unmasked
from tests.support.control_plane import (
    AUTH,
    SUB_FORM,
    TOKEN,
    ControlPlane,
    browser_control_plane,
    create_shop,
    fill_path,
)
from tests.support.ui_pages import csrf, hidden

SUBS = "/v1/projects/shop/subscriptions"
SIGNING = "whsec_" + "U0VL" * 8
STORED = {
    "Authorization": "Bearer sekret-bearer-5b1e",
    "X-Api-Key": "sekret-key-77c0",
    "X-Auth-Token": "sekret-token-c3d9",
    "X-Region": "eu",
}
SECRETS = ("sekret-", SIGNING)
SUB = {
    "name": "billing",
    "topic": "orders",
    "endpoint": {"url": "http://127.0.0.1:9/hook", "headers": STORED},
    "signing_secret": SIGNING,
}
PASSWORD = "viewer-password-1"


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with browser_control_plane(tmp_path, users={}) as built:
        c = built.client
        await create_shop(c, headers=AUTH)
        r = await c.post(SUBS, json=SUB, headers=AUTH)
        assert r.status_code == 201, r.text
        body = {"name": "vic", "password": PASSWORD, "roles": ["viewer:shop"]}  # of the shop
        assert (await c.post("/v1/users", json=body, headers=AUTH)).status_code == 201
        yield built


def _clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{where} shows {secret}…"


async def _viewer_token(client: httpx.AsyncClient) -> dict[str, str]:
    r = await client.post("/v1/tokens", json={"user": "vic"}, headers=AUTH)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def test_a_viewers_walk_over_every_get_route_finds_no_secret(cp: ControlPlane) -> None:
    assert cp.app is not None
    r = await cp.client.post("/v1/projects/shop/tokens", json={}, headers=AUTH)
    assert r.status_code == 201, r.text
    machine = await cp.client.post("/v1/tokens", json={"roles": ["viewer:shop"]}, headers=AUTH)
    callers = {
        "viewer user": await _viewer_token(cp.client),
        "viewer machine": {"Authorization": f"Bearer {machine.json()['token']}"},
    }
    paths = cp.app.openapi()["paths"]
    gets = [p for p, item in paths.items() if "get" in item]
    assert len(gets) >= 30  # the walk is over the real table
    answered = 0
    for name, headers in callers.items():
        for path in gets:
            r = await cp.client.get(fill_path(path), headers=headers)
            _clean(r.text, f"{name}: GET {path} -> {r.status_code}")
            answered += r.status_code == 200
    print(f"{len(gets)} GET routes walked by {len(callers)} viewers, {answered} answers 200")
    assert answered >= 2 * 15, answered
    # The reads that do show the subscription show its credential headers masked.
    for name, headers in callers.items():
        shown = (await cp.client.get(f"{SUBS}/billing", headers=headers)).json()
        assert shown["endpoint"]["headers"] == masked(STORED), name
        listed = (await cp.client.get(SUBS, headers=headers)).json()["items"]
        assert listed[0]["endpoint"]["headers"] == masked(STORED), name


async def test_a_viewers_walk_over_every_ui_page_finds_no_secret(cp: ControlPlane) -> None:
    browser = cp.client
    page = await browser.get("/ui/login")
    form = {"user": "vic", "password": PASSWORD, "nonce": hidden(page.text, "nonce")}
    r = await browser.post("/ui/login", data={**form, "next": "/ui/projects"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects", r.text
    pages = [
        route.path
        for module in ui.ROUTERS
        for route in module.router.routes
        if "GET" in getattr(route, "methods", ())
    ]
    assert len(pages) >= 15
    shown = 0
    for path in pages:
        r = await browser.get(fill_path(path), follow_redirects=True)
        _clean(r.text, f"viewer page {path} -> {r.status_code}")
        shown += r.status_code == 200
    print(f"{len(pages)} UI pages walked by a viewer, {shown} answered 200")
    assert shown >= 10, shown
    sub_page = await browser.get("/ui/projects/shop/subscriptions/billing")
    assert sub_page.status_code == 200 and "billing" in sub_page.text


async def test_every_role_reads_masked_and_writes_keep_the_secret(cp: ControlPlane) -> None:
    c = cp.client
    current = (await c.get(f"{SUBS}/billing", headers=AUTH)).json()
    assert current["endpoint"]["headers"] == masked(STORED)  # the admin token too
    body = {
        "endpoint": current["endpoint"],
        "version": current["version"],
        "max_in_flight": 9,
    }
    r = await c.put(f"{SUBS}/billing", json=body, headers=AUTH)
    assert r.status_code == 200, r.text
    _clean(r.text, "PUT answer")
    stored = await cp.catalog.get_subscription("shop", "billing")
    assert stored.endpoint.headers == STORED and stored.max_in_flight == 9
    # A new value replaces the stored one; a dropped header is gone.
    headers = {**masked(STORED), "X-Api-Key": "sekret-key-new"}
    del headers["X-Auth-Token"]
    body = {**body, "endpoint": {**current["endpoint"], "headers": headers}}
    r = await c.put(f"{SUBS}/billing", json={**body, "version": stored.version}, headers=AUTH)
    assert r.status_code == 200, r.text
    stored = await cp.catalog.get_subscription("shop", "billing")
    assert stored.endpoint.headers == {
        "Authorization": STORED["Authorization"],
        "X-Api-Key": "sekret-key-new",
        "X-Region": "eu",
    }


async def test_a_mask_with_nothing_stored_is_refused(cp: ControlPlane) -> None:
    c = cp.client
    sub = {**SUB, "name": "masked", "endpoint": {"url": "http://127.0.0.1:9/h"}}
    sub["endpoint"]["headers"] = {"X-Other-Token": MASK}
    r = await c.post(SUBS, json=sub, headers=AUTH)
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed"), r.text
    assert r.json()["details"]["fields"][0]["field"] == "endpoint.headers.X-Other-Token"
    current = (await c.get(f"{SUBS}/billing", headers=AUTH)).json()
    endpoint = {**current["endpoint"], "headers": {"Cookie": MASK}}
    r = await c.put(
        f"{SUBS}/billing",
        json={"endpoint": endpoint, "version": current["version"]},
        headers=AUTH,
    )
    assert r.status_code == 422 and r.json()["details"]["fields"][0]["field"].endswith("Cookie")
    assert (await cp.catalog.get_subscription("shop", "billing")).endpoint.headers == STORED


async def test_the_ui_edit_form_keeps_the_credentials(cp: ControlPlane) -> None:
    browser = cp.client
    page = await browser.get("/ui/login")
    r = await browser.post("/ui/login", data={"token": TOKEN, "nonce": hidden(page.text, "nonce")})
    assert r.status_code == 303
    edit = "/ui/projects/shop/subscriptions/billing/edit"
    token = await csrf(browser, edit)
    form = {**SUB_FORM, "name": "billing", "max_in_flight": "4", "csrf": token}
    r = await browser.post(edit, data=form)
    assert r.status_code == 303, r.text[:500]
    stored = await cp.catalog.get_subscription("shop", "billing")
    assert stored.max_in_flight == 4 and stored.endpoint.headers == STORED


async def test_only_the_audited_reveal_shows_them(
    cp: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    c = cp.client
    with caplog.at_level(logging.INFO, logger="httpbus.audit"):
        r = await c.post(f"{SUBS}/billing/secret:reveal", headers=AUTH)
    assert r.status_code == 200, r.text
    secrets = {k: v for k, v in STORED.items() if k != "X-Region"}
    assert r.json()["endpoint_headers"] == secrets
    [line] = [rec.getMessage() for rec in caplog.records if rec.name == "httpbus.audit"]
    assert "shop/billing" in line and "sekret" not in line
    viewer = await _viewer_token(c)
    assert (await c.post(f"{SUBS}/billing/secret:reveal", headers=viewer)).status_code == 403
    rotated = await c.post(f"{SUBS}/billing/secret:rotate", json={}, headers=AUTH)
    assert rotated.status_code == 200 and "endpoint_headers" not in rotated.json()
    _clean(rotated.text.replace(SIGNING, ""), "rotate answer")


def test_which_names_are_credentials() -> None:
    secret = [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "X-Api-Key",
        "api_key",
        "X-Auth-Token",
        "X-Hub-Signature",
        "Client-Secret",
        "X-Session-Id",
    ]
    plain = ["X-Region", "X-Request-Id", "Content-Type", "X-Keyboard", "Accept"]
    assert all(is_secret(n) for n in secret)
    assert not any(is_secret(n) for n in plain)
    assert unmasked({"x-api-key": MASK, "X-Region": MASK}, {"X-API-KEY": "k"}) == {
        "x-api-key": "k",
        "X-Region": MASK,  # not a credential's name: a value like any other
    }

"""The subscription form's endpoint authentication (issue 40 item 4): a mode and its fields
reach the API, a write-only value is never put in a page and an edit that leaves it empty
keeps it, and the API's refusal lands next to the field."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from tests.support.auth_doubles import TestCA
from tests.support.control_plane import SUB_FORM, create_shop, embedded_control_plane
from tests.support.ui_pages import TOKEN, csrf, login

API = {"Authorization": f"Bearer {TOKEN}"}
NEW = "/ui/projects/shop/subscriptions/new"
SUB = "/v1/projects/shop/subscriptions/s1"
OAUTH = {
    "auth_type": "oauth2_client_credentials",
    "auth_token_url": "https://id.example.com/token",
    "auth_client_id": "httpbus",
    "auth_client_secret": "sekret-ui-31",
    "auth_scope": "hooks:write",
}


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        await create_shop(cp.client, headers=API)
        await login(cp.client)
        yield cp.client


async def test_oauth_through_the_form_keeps_the_secret_out_of_pages(
    browser: httpx.AsyncClient,
) -> None:
    token = await csrf(browser, NEW)
    r = await browser.post(NEW, data={**SUB_FORM, **OAUTH, "csrf": token})
    assert r.status_code == 303, r.text[:2000]
    sub = (await browser.get(SUB, headers=API)).json()
    assert sub["auth"]["client_id"] == "httpbus" and sub["auth"]["client_secret"] == "********"
    page = await browser.get("/ui/projects/shop/subscriptions/s1/edit")
    assert "sekret-ui" not in page.text and "stored: empty keeps it" in page.text
    assert 'value="oauth2_client_credentials" selected' in page.text
    # An edit with the secret left empty keeps it; another field changes.
    edit = {**SUB_FORM, **OAUTH, "auth_client_secret": "", "auth_scope": "other", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 303, r.text[:2000]
    revealed = (await browser.post(f"{SUB}/secret:reveal", headers=API)).json()
    assert revealed["auth_secrets"] == {"client_secret": "sekret-ui-31"}
    assert (await browser.get(SUB, headers=API)).json()["auth"]["scope"] == "other"


async def test_refusals_land_next_to_the_field(browser: httpx.AsyncClient) -> None:
    token = await csrf(browser, NEW)
    bad = {**OAUTH, "auth_token_url": "http://169.254.169.254/token"}
    r = await browser.post(NEW, data={**SUB_FORM, **bad, "csrf": token})
    assert r.status_code == 422 and 'id="error-auth_token_url"' in r.text
    empty = {**OAUTH, "auth_client_secret": ""}  # nothing stored: it is required
    r = await browser.post(NEW, data={**SUB_FORM, **empty, "csrf": token})
    assert r.status_code == 422 and "client_secret" in r.text


async def test_mtls_and_jwt_through_the_form(browser: httpx.AsyncClient) -> None:
    ca = TestCA.make()
    client = ca.issue("worker", server=False)
    token = await csrf(browser, NEW)
    mtls = {
        "auth_type": "mtls",
        "auth_client_cert": client.cert_pem,
        "auth_client_key": client.key_pem,
        "auth_ca": ca.pem,
    }
    form = {**SUB_FORM, "endpoint_url": "https://hooks.example.com/in", **mtls}
    r = await browser.post(NEW, data={**form, "csrf": token})
    assert r.status_code == 303, r.text[:2000]
    page = await browser.get("/ui/projects/shop/subscriptions/s1/edit")
    assert "PRIVATE KEY" not in page.text and "BEGIN CERTIFICATE" in page.text
    jwt_form = {**form, "auth_type": "jwt", "auth_audience": "urn:hooks", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=jwt_form)
    assert r.status_code == 303, r.text[:2000]
    sub = (await browser.get(SUB, headers=API)).json()
    assert sub["auth"] == {"type": "jwt", "audience": "urn:hooks"}
    page = await browser.get("/ui/projects/shop/subscriptions/s1")
    assert '<span id="auth-type">jwt</span>' in page.text

"""A disabled subscription in the web UI: the page and the list say
``disabled (endpoint failing since …)``, the page offers Enable, which enables it; the form
sets ``endpoint.disable_after_s``; and the CLI's status line says the same."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from cli.sub import print_status
from core.model import Disabled
from tests.support.control_plane import embedded_control_plane
from tests.support.ui_pages import TOKEN, csrf, login

API = {"Authorization": f"Bearer {TOKEN}"}
SINCE = datetime(2026, 11, 24, 8, 0, 0, tzinfo=UTC)


async def test_the_page_shows_disabled_and_enable_enables(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        browser = cp.client
        await browser.post("/v1/projects", json={"name": "shop"}, headers=API)
        await browser.post("/v1/projects/shop/topics", json={"name": "orders"}, headers=API)
        sub = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/h"}}
        r = await browser.post("/v1/projects/shop/subscriptions", json=sub, headers=API)
        assert r.status_code == 201, r.text
        stored = await cp.catalog.get_subscription("shop", "s1")
        marker = Disabled(failing_since=SINCE, disabled_at=SINCE, last_error="HTTP 503")
        await cp.catalog.update_subscription(stored.model_copy(update={"disabled": marker}))

        await login(browser)
        page = await browser.get("/ui/projects/shop/subscriptions/s1")
        assert "disabled (endpoint failing since 2026-11-24T08:00:00Z)" in page.text
        assert 'id="enable"' in page.text and "HTTP 503" in page.text
        listing = await browser.get("/ui/projects/shop/subscriptions")
        assert '<span class="sub-state bad">disabled</span>' in listing.text
        token = await csrf(browser, "/ui/projects/shop/subscriptions/s1")
        url = "/ui/projects/shop/subscriptions/s1/enable"
        r = await browser.post(url, data={"csrf": token})
        assert r.status_code == 303
        assert (await cp.catalog.get_subscription("shop", "s1")).disabled is None
        page = await browser.get("/ui/projects/shop/subscriptions/s1")
        assert 'id="enable"' not in page.text

        edit = await browser.get("/ui/projects/shop/subscriptions/s1/edit")
        assert 'name="endpoint_disable_after_s"' in edit.text and 'value="86400"' in edit.text


def test_the_cli_status_line_says_disabled(capsys: pytest.CaptureFixture[str]) -> None:
    detail = "disabled (endpoint failing since 2026-11-24T08:00:00Z)"
    status = {
        "subscription": "shop/s1",
        "state": "disabled",
        "state_detail": detail,
        "lag": 0,
        "in_flight": 0,
        "partitions": [],
    }
    print_status(status)
    assert f"shop/s1: {detail}" in capsys.readouterr().out

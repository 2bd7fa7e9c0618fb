"""The topic catalog in real Chromium against a running ``httpbus dev`` (issue 39 item 3), on a
phone's width (390 px): an owner of ``other`` opens *Catalog* from the header, searches,
opens ``shop/orders`` and requests access; an owner of ``shop`` sees the request on the
topic's page and approves it; the first user's card then says they may subscribe.
Screenshots for docs/catalog.md."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.dev import Dev, run_dev
from tests.support.ui import TOKEN, admin, needs_chromium, shot

pytestmark = needs_chromium
PASSWORDS = {"olga": "olga's long password", "sam": "sam's long password"}
PHONE = {"width": 390, "height": 844}
SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}},
    "examples": [{"order": 42, "total": "9.90"}],
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    """Projects shop (topic orders, with a schema and its example) and other; olga owns
    other, sam owns shop."""
    data = tmp_path_factory.mktemp("ui-catalog")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HTTPBUS_DATABASE_URL", f"sqlite:///{data / 'reports.db'}")
        with run_dev(data, TOKEN) as dev:
            with admin(dev) as api:
                for name in ("shop", "other"):
                    assert api.post("/v1/projects", json={"name": name}).status_code == 201
                topic = {"name": "orders", "partitions": 1, "description": "Orders as placed"}
                r = api.post("/v1/projects/shop/topics", json=topic)
                assert r.status_code == 201, r.text
                r = api.put("/v1/projects/shop/topics/orders/schema", json={"schema": SCHEMA})
                assert r.is_success, r.text
                for user, role in (("olga", "owner:other"), ("sam", "owner:shop")):
                    body = {"name": user, "password": PASSWORDS[user], "roles": [role]}
                    assert api.post("/v1/users", json=body).status_code == 201
            yield dev


def _log_in_as(page: Page, dev: Dev, user: str) -> None:
    page.goto(f"{dev.control_plane}/ui/projects")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    page.fill("#login-user input[name=user]", user)
    page.fill("#login-user input[name=password]", PASSWORDS[user])
    page.click("#login-as-user")
    expect(page.locator("#who")).to_contain_text(user)


def _fits(page: Page) -> None:
    """Nothing wider than the phone's screen: no sideways scrolling."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page is {width} px wide on a {PHONE['width']} px screen"


def test_search_request_and_approve_on_a_phone(browser: Browser, world: Dev) -> None:
    base = world.control_plane
    olga_context = browser.new_context(viewport=PHONE)
    sam_context = browser.new_context(viewport=PHONE)
    try:
        olga = olga_context.new_page()
        _log_in_as(olga, world, "olga")
        olga.click("#nav-catalog")
        expect(olga.locator("h1")).to_have_text("Topic catalog")
        olga.fill("#catalog-search input[name=q]", "placed")
        olga.click("#catalog-search button")
        card = olga.locator('[data-topic="shop/orders"]')
        expect(card).to_be_visible()
        expect(card).to_contain_text("requestable")
        expect(card).to_contain_text("may ask as other")
        expect(olga.locator("#catalog .card")).to_have_count(1)
        _fits(olga)
        shot(olga, "19-catalog-search")
        card.locator("a").first.click()
        expect(olga.locator("#topic-card h1")).to_contain_text("shop/orders")
        expect(olga.locator("#owners")).to_have_text("sam")
        expect(olga.locator("#example")).to_contain_text('"order": 42')
        olga.fill("#request-access input[name=reason]", "we invoice orders")
        _fits(olga)
        shot(olga, "20-catalog-topic")
        olga.click("#request-access button")
        expect(olga.locator(".flash")).to_contain_text("asked the owners of shop")
        expect(olga.locator("#your-access")).to_contain_text("pending request of other")
        expect(olga.locator("#request-access")).to_have_count(0)

        sam = sam_context.new_page()
        _log_in_as(sam, world, "sam")
        sam.goto(f"{base}/ui/projects/shop/topics/orders")
        row = sam.locator('#grant-requests tr[data-grantee="other"]')
        expect(row).to_contain_text("we invoice orders")
        expect(row).to_contain_text("user:olga")
        _fits(sam)
        shot(sam, "21-grant-request")
        row.locator("input[name=note]").fill("welcome")
        row.locator("button:has-text('Approve')").click()
        expect(sam.locator(".flash")).to_contain_text("approved the request of other")
        expect(sam.locator("#no-grant-requests")).to_be_visible()

        olga.reload()
        expect(olga.locator("#your-access")).to_contain_text("may subscribe as other")
        with admin(world) as api:
            grants = api.get("/v1/projects/shop/topics/orders/grants").json()
        assert [g["grantee"] for g in grants] == ["other"]
        olga.click("#subscribe")
        expect(olga.locator("input[name=topic]")).to_have_value("shop/orders")
    finally:
        olga_context.close()
        sam_context.close()

"""The console's smaller promises, in real Chromium against a running ``httpbus dev``: every
main page fits a phone's 390 px (tables scroll inside their own box), the trace page opens on
an empty search form without an error, a delivered event shows no bare "ms", the name
fields' browser check runs (its pattern compiles under the ``v`` flag) and "open by name"
says when there is no such name."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import ConsoleMessage, Page, expect

from tests.support.dev import Dev, run_dev
from tests.support.ui import AUTH, TOKEN, admin, hook, log_in, needs_chromium, shot
from tests.support.until import until_sync

pytestmark = needs_chromium
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with run_dev(tmp_path_factory.mktemp("ui-console"), TOKEN) as running:
        yield running


@pytest.fixture(scope="module")
def delivered(dev: Dev) -> str:
    """Project shop, topic orders (2 partitions) with subscription mailer, and one message
    delivered and traced as delivered: its id."""
    mid = "order-m-1"
    with hook() as endpoint, admin(dev) as api:
        assert api.post("/v1/projects", json={"name": "shop"}).status_code == 201
        topic = {"name": "orders", "partitions": 2}
        assert api.post("/v1/projects/shop/topics", json=topic).status_code == 201
        sub = {"name": "mailer", "topic": "orders", "endpoint": {"url": endpoint.url}}
        assert api.post("/v1/projects/shop/subscriptions", json=sub).status_code == 201
        r = httpx.post(
            f"{dev.producer}/v1/projects/shop/topics/orders/produce",
            content=b'{"order": 1}',
            headers={**AUTH, "X-Message-Id": mid},
        )
        assert r.status_code == 201, r.text
        until_sync(lambda: endpoint.delivered, 30, "the order delivered")

        def indexed() -> bool:
            r = api.get(f"/v1/projects/shop/topics/orders/messages/{mid}")
            return r.status_code == 200 and r.json()["subscriptions"][0]["state"] == "delivered"

        until_sync(indexed, 30, "the trace saying delivered")
    return mid


def _errors(page: Page) -> list[str]:
    errors: list[str] = []

    def seen(message: ConsoleMessage) -> None:
        if message.type in ("error", "warning"):
            errors.append(message.text)

    page.on("console", seen)
    return errors


def test_every_main_page_fits_a_phone(page: Page, dev: Dev, delivered: str) -> None:
    log_in(page, dev)
    page.set_viewport_size(PHONE)
    widths = {}
    for url in (
        "/ui/",
        "/ui/search?q=orders",
        "/ui/projects",
        "/ui/projects/shop/topics",
        "/ui/projects/shop/topics/orders",
        "/ui/projects/shop/subscriptions",
        "/ui/projects/shop/subscriptions/mailer",
        "/ui/projects/shop/subscriptions/mailer/dlq",
        "/ui/projects/shop/topics/orders/cutover",
        "/ui/projects/shop/topics/orders/migration",
        f"/ui/projects/shop/topics/orders/messages/{delivered}",
        "/ui/trace",
        "/ui/audit",
        "/ui/users",
    ):
        page.goto(f"{dev.control_plane}{url}")
        widths[url] = page.evaluate("document.scrollingElement.scrollWidth")
    page.goto(f"{dev.control_plane}/ui/projects/shop/subscriptions/mailer")
    shot(page, "console-phone-subscription")
    assert {u: w for u, w in widths.items() if w > PHONE["width"]} == {}, widths


def test_the_trace_page_opens_empty_and_a_delivered_event_has_no_bare_unit(
    page: Page, dev: Dev, delivered: str
) -> None:
    log_in(page, dev)
    errors = _errors(page)
    answer = page.goto(f"{dev.control_plane}/ui/trace")
    assert answer is not None and answer.status == 200
    expect(page.locator("#trace-search input[name=project]")).to_have_value("")
    expect(page.locator("#trace-missing")).to_have_count(0)
    assert errors == []
    page.fill("#trace-search input[name=project]", "shop")
    page.fill("#trace-search input[name=topic]", "orders")
    page.fill("#trace-search input[name=id]", delivered)
    page.click("#trace-search button")
    rows = page.locator("section.trace-sub table.trace-events")
    latency = rows.locator("tr.event-delivered td:nth-child(6)")
    expect(latency).to_have_text("")  # the delivery itself has no latency of its own
    attempted = rows.locator("tr.event-attempted td:nth-child(6)")
    expect(attempted).to_have_text(re.compile(r"^\d+(\.\d+)? ms$"))
    shot(page, "console-trace-delivered")


def test_name_fields_are_checked_by_the_browser(page: Page, dev: Dev, delivered: str) -> None:
    errors = _errors(page)
    log_in(page, dev, "/ui/projects/shop/topics")
    field = page.locator("#new-topic input[name=name]")
    field.fill("bad name!")
    assert field.evaluate("el => el.validity.patternMismatch") is True
    field.fill("good-name_1")
    assert field.evaluate("el => el.validity.valid") is True
    opener = page.locator("form.open input[name=open]")
    opener.fill("no/such")
    assert opener.evaluate("el => el.validity.patternMismatch") is True
    assert not [e for e in errors if "pattern" in e.lower()], errors


def test_open_by_name_says_when_there_is_no_such_name(page: Page, dev: Dev, delivered: str) -> None:
    log_in(page, dev, "/ui/projects/shop/topics")
    page.fill("form.open input[name=open]", "nope")
    page.press("form.open input[name=open]", "Enter")
    expect(page.locator(".flash.error")).to_have_text("No topic named nope here.")
    page.fill("form.open input[name=open]", "orders")
    page.press("form.open input[name=open]", "Enter")
    expect(page.locator("h1")).to_have_text("Topic shop/orders")

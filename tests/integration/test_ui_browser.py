"""The web control plane in real Chromium (Debian's /usr/bin/chromium driven by Playwright,
headless) against a running ``httpbus dev``: log in, create a topic and a subscription
through the forms, publish through the API and see it delivered, an invalid filter shown
inline that creates nothing, and pages that stay usable with 1 000 topics and 1 000
subscriptions. Every test saves a screenshot in docs/screenshots/ (the README's tour)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.support.dev import Dev, run_dev
from tests.support.ui import AUTH, TOKEN, Hook, log_in, needs_chromium, shot
from tests.support.until import until_sync

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with run_dev(tmp_path_factory.mktemp("ui-browser"), TOKEN) as running:
        yield running


def test_login(page: Page, dev: Dev) -> None:
    page.goto(f"{dev.control_plane}/ui/projects")
    expect(page.locator("h1")).to_have_text("Log in")
    page.fill("input[name=token]", "not-the-token")
    page.click("button:has-text('Log in')")
    expect(page.locator(".flash.error")).to_contain_text("not the admin token")
    shot(page, "01-login")
    page.fill("input[name=token]", TOKEN)
    page.click("button:has-text('Log in')")
    expect(page.locator("h1")).to_have_text("Projects")
    cookie = next(c for c in page.context.cookies() if c["name"] == "httpbus_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"


def test_topic_and_subscription_through_the_forms_then_delivery(
    page: Page, dev: Dev, endpoint: Hook
) -> None:
    url, received = endpoint.url, endpoint.delivered
    log_in(page, dev)
    page.fill("form[action='/ui/projects'] input[name=name]", "shop")
    page.click("button:has-text('Create project')")
    expect(page.locator("h1")).to_have_text("Topics of shop")
    form = page.locator("#new-topic")
    form.locator("input[name=name]").fill("orders")
    form.locator("select[name=cluster]").select_option("embedded")
    form.locator("input[name=partitions]").fill("2")
    form.locator("button").click()
    expect(page.locator("h1")).to_have_text("Topic shop/orders")
    expect(page.locator("#timeline g.segment")).to_have_count(1)
    expect(page.locator("#timeline")).to_contain_text("embedded · 2 partition(s)")
    shot(page, "02-topic-timeline")

    page.click("a:has-text('new subscription')")
    page.fill("input[name=name]", "mailer")
    page.fill("input[name=endpoint_url]", url)
    page.fill("input[name=retry_max_attempts]", "3")
    page.fill("#filter", 'headers["x-region"] == "eu"')
    expect(page.locator("#error-filter")).to_be_hidden()
    shot(page, "03-subscription-form")
    page.click("button:has-text('Create subscription')")
    expect(page.locator("h1")).to_have_text("Subscription shop/mailer")

    sent = [f"order-{i}".encode() for i in range(10)]
    for body in sent:
        headers = {**AUTH, "X-Region": "eu"}
        r = httpx.post(
            f"{dev.producer}/v1/projects/shop/topics/orders/produce", content=body, headers=headers
        )
        assert r.status_code == 201, r.text
    until_sync(lambda: sorted(received) == sorted(sent), 30, "every order at the endpoint", 0.1)
    # The page polls the status API: the count rises without a reload.
    expect(page.locator("#delivered")).to_have_text(str(len(sent)), timeout=15_000)
    shot(page, "04-subscription")


def test_invalid_filter_is_shown_inline_and_creates_nothing(page: Page, dev: Dev) -> None:
    with httpx.Client(base_url=dev.control_plane, headers=AUTH) as auth:
        assert auth.post("/v1/projects", json={"name": "filters"}).status_code == 201
        assert auth.post("/v1/projects/filters/topics", json={"name": "t"}).status_code == 201
    log_in(page, dev, "/ui/projects/filters/subscriptions/new")
    page.fill("input[name=name]", "bad")
    page.fill("input[name=topic]", "t")
    page.fill("input[name=endpoint_url]", "http://127.0.0.1:9/hook")
    page.fill("#filter", 'headers["x"] ==')
    # While typing: the same compiler as the API, with the position.
    expect(page.locator("#error-filter")).to_be_visible()
    expect(page.locator("#error-filter")).to_contain_text("line 1, column 16")
    page.click("button:has-text('Create subscription')")
    expect(page.locator("#error-filter")).to_contain_text("column 16")  # after the server's 422
    expect(page.locator("#filter")).to_have_value('headers["x"] ==')
    shot(page, "05-invalid-filter")
    with httpx.Client(base_url=dev.control_plane, headers=AUTH) as auth:
        assert auth.get("/v1/projects/filters/subscriptions").json()["total"] == 0


def _load(page: Page, url: str) -> float:
    start = time.perf_counter()
    page.goto(url, wait_until="load")
    return time.perf_counter() - start


def test_a_thousand_topics_and_subscriptions_stay_usable(page: Page, dev: Dev) -> None:
    with httpx.Client(base_url=dev.control_plane, headers=AUTH, timeout=30) as api:
        assert api.post("/v1/projects", json={"name": "big"}).status_code == 201
        made = time.perf_counter()
        for i in range(1000):
            r = api.post("/v1/projects/big/topics", json={"name": f"topic-{i:04d}"})
            assert r.status_code == 201, r.text
        for i in range(1000):
            body = {
                "name": f"sub-{i:04d}",
                "topic": "topic-0000",
                "endpoint": {"url": "http://127.0.0.1:9/hook"},
                "paused": True,  # a thousand paused subscriptions: no load on the worker
            }
            r = api.post("/v1/projects/big/subscriptions", json=body)
            assert r.status_code == 201, r.text
        print(f"created 1000 topics and 1000 subscriptions in {time.perf_counter() - made:.1f} s")
    log_in(page, dev)
    base = f"{dev.control_plane}/ui/projects/big"
    figures = {}
    for label, url, rows in (
        ("topics, first page of 50", f"{base}/topics", 50),
        ("topics, page 20 of 20", f"{base}/topics?offset=950&limit=50", 50),
        ("topics, 200 per page", f"{base}/topics?offset=0&limit=200", 200),
        ("subscriptions, first page of 50", f"{base}/subscriptions", 50),
        ("subscriptions, last page", f"{base}/subscriptions?offset=950&limit=50", 50),
    ):
        seconds = _load(page, url)
        table = "#topics" if "topics" in url else "#subscriptions"
        expect(page.locator(f"{table} tbody tr")).to_have_count(rows)
        figures[label] = seconds
    expect(page.locator(".pager .count")).to_have_text("951–1000 of 1000")
    shot(page, "06-thousand-subscriptions")
    for label, seconds in figures.items():
        print(f"load {label}: {seconds * 1000:.0f} ms")
    # Generous bound: shared 2-core machine; a page of 50 is far below it.
    assert max(figures.values()) < 15, figures

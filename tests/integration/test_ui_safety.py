"""Controls that ask before they act, and live figures that say when they stopped, in real
Chromium with the pages' Content-Security-Policy on: Start cutover and Abort ask (dismissing
the question does nothing, accepting acts), and a subscription page whose polling fails says
"stale since", whose session ended says "signed out". Against the contract fake of the
control plane (tests/support/contract_api.py), so a cutover can be held in PREPARE."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from playwright.sync_api import Page, Route, expect

from control_plane import ui
from tests.support.contract_api import fake_app, served
from tests.support.dev import Dev
from tests.support.ui import TOKEN, log_in, needs_chromium, shot
from tests.support.until import until_sync

pytestmark = needs_chromium
TOPIC = "/ui/projects/shop/topics/orders"
SUB = "/ui/projects/shop/subscriptions/s1"


@pytest.fixture
def fake() -> Iterator[tuple[FastAPI, Dev]]:
    """The fake control plane with the UI, served; its URL as a ``Dev`` for ``log_in``."""
    app = fake_app()
    ui.install(app, TOKEN, ["embedded", "pulsar-main"], "embedded")
    with served(app) as url:
        yield app, Dev(url, url, url)


def _csp_errors(page: Page) -> list[str]:
    """Console errors the page logs from now on (a CSP refusal is one)."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    return errors


def _answer(page: Page, accept: bool) -> list[str]:
    """Answer the page's next dialog; the questions asked, as they come."""
    asked: list[str] = []

    def handle(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept() if accept else dialog.dismiss()

    page.once("dialog", handle)
    return asked


def test_start_cutover_asks_and_acts_only_when_accepted(
    page: Page, fake: tuple[FastAPI, Dev]
) -> None:
    app, dev = fake
    log_in(page, dev, TOPIC)
    errors = _csp_errors(page)
    page.reload()
    csp = page.evaluate("fetch(location.href).then(r => r.headers.get('content-security-policy'))")
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    form = page.locator("#migrate")
    form.locator("select[name=cluster]").select_option("pulsar-main")
    form.locator("input[name=partitions]").fill("8")
    asked = _answer(page, accept=False)
    form.locator("button").click()
    until_sync(lambda: asked, 10, "the question")
    assert asked[0].startswith("Start a cutover of shop/orders to pulsar-main with 8 partition(s)?")
    expect(page).to_have_url(re.compile(re.escape(TOPIC) + "$"))
    assert app.state.fake.cutover is None  # dismissed: nothing started
    asked = _answer(page, accept=True)
    form.locator("button").click()
    expect(page).to_have_url(re.compile(r"/topics/orders/cutover$"))
    assert asked and app.state.fake.cutover is not None
    assert app.state.fake.cutover["cluster"] == "pulsar-main"
    assert not [e for e in errors if "Content Security Policy" in e], errors


def test_abort_asks_during_prepare_and_acts_only_when_accepted(
    page: Page, fake: tuple[FastAPI, Dev]
) -> None:
    app, dev = fake
    app.state.fake.cutover_holds = True  # the cutover waits in PREPARE while the test looks
    r = httpx.post(
        f"{dev.control_plane}/v1/projects/shop/topics/orders/cutover",
        json={"cluster": "embedded", "partitions": 2},
    )
    assert r.status_code == 202, r.text
    log_in(page, dev, f"{TOPIC}/cutover")
    errors = _csp_errors(page)
    expect(page.locator("#phase")).to_have_attribute("data-phase", "PREPARE")
    asked = _answer(page, accept=False)
    page.locator("#abort button").click()
    until_sync(lambda: asked, 10, "the question")
    assert asked[0].startswith("Abort the cutover of shop/orders?")
    expect(page.locator("#phase")).to_have_attribute("data-phase", "PREPARE")
    assert app.state.fake.cutover["phase"] == "PREPARE"  # dismissed: not aborted
    shot(page, "safety-abort-asks")
    asked = _answer(page, accept=True)
    page.locator("#abort button").click()
    expect(page.locator(".flash")).to_contain_text("abort requested")
    expect(page.locator("#phase")).to_have_attribute("data-phase", "ABORTED")
    assert asked and app.state.fake.cutover["phase"] == "ABORTED"
    assert not [e for e in errors if "Content Security Policy" in e], errors


def test_a_live_page_says_when_its_figures_are_stale_and_when_signed_out(
    page: Page, fake: tuple[FastAPI, Dev]
) -> None:
    _, dev = fake
    log_in(page, dev, SUB)
    banner = page.locator("#stale")
    expect(banner).to_be_hidden()

    def failing(route: Route) -> None:
        route.fulfill(status=502, body="bad gateway")

    polled = re.compile(r"/status\.json(\?|$)")  # the page asks for its range (?range=1h)
    page.route(polled, failing)
    expect(banner).to_be_visible(timeout=20_000)  # three polls, two seconds apart
    expect(banner).to_contain_text(re.compile(r"Figures stale since \d\d:\d\d:\d\d"))
    shot(page, "safety-stale-banner")
    page.unroute(polled, failing)
    expect(banner).to_be_hidden(timeout=10_000)  # the next good poll: fresh again
    page.context.clear_cookies()  # the session ends (a logout elsewhere, an expiry)
    expect(banner).to_be_visible(timeout=10_000)
    expect(banner).to_contain_text("Signed out")
    link = banner.locator("a")
    expect(link).to_have_text("sign in again")
    link.click()
    expect(page).to_have_url(re.compile(r"/ui/login\?next=" + re.escape("%2Fui%2Fprojects")))

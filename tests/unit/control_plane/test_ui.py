"""The web UI on a real in-process control plane (embedded backends): no page without a
session, forms refuse a missing CSRF token, topics and subscriptions are created through the
forms, an invalid filter is shown next to the field and creates nothing, the timeline is drawn."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from control_plane.ui.session import SESSION_COOKIE
from tests.support.control_plane import SUB_FORM, embedded_control_plane
from tests.support.ui_pages import TOKEN, csrf, login

API = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
async def browser(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    """A cookie-keeping client of the UI, not yet logged in."""
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        yield cp.client


async def test_no_page_without_login_and_a_wrong_token_is_refused(
    browser: httpx.AsyncClient,
) -> None:
    forms = ("/ui/projects/shop/subscriptions/new", "/ui/projects/shop/subscriptions/s/edit")
    for url in ("/ui/projects", "/ui/projects/shop/topics", "/ui/audit", "/ui/", *forms):
        r = await browser.get(url)
        assert r.status_code == 303 and r.headers["location"].startswith("/ui/login?next="), url
    r = await browser.get("/ui/projects/shop/subscriptions/s/status.json")
    assert r.status_code == 401
    bad = await login(browser, "not-the-token")
    assert bad.status_code == 303 and bad.headers["location"].startswith("/ui/login")
    assert SESSION_COOKIE not in browser.cookies
    assert (await browser.get("/ui/projects")).status_code == 303


async def test_login_sets_a_strict_httponly_signed_cookie(browser: httpx.AsyncClient) -> None:
    r = await login(browser)
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects"
    cookie = next(h for h in r.headers.get_list("set-cookie") if h.startswith(SESSION_COOKIE))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/ui" in cookie
    assert (await browser.get("/ui/projects")).status_code == 200
    # A tampered cookie is no session.
    value = browser.cookies[SESSION_COOKIE]
    browser.cookies.set(
        SESSION_COOKIE, value[:-2] + ("AA" if value[-2:] != "AA" else "BB"), path="/ui"
    )
    assert (await browser.get("/ui/projects")).status_code == 303


async def test_a_form_without_the_csrf_token_is_refused(browser: httpx.AsyncClient) -> None:
    await login(browser)
    r = await browser.post("/ui/projects", data={"name": "shop"})
    assert r.status_code == 403 and "stale" in r.text
    r = await browser.post("/ui/projects", data={"name": "shop", "csrf": "forged"})
    assert r.status_code == 403
    api = await browser.get("/v1/projects", headers=API)
    assert api.json()["items"] == []


async def _project_and_topic(browser: httpx.AsyncClient) -> None:
    await login(browser)
    token = await csrf(browser)
    r = await browser.post("/ui/projects", data={"name": "shop", "csrf": token})
    assert r.status_code == 303, r.text
    form = {"name": "orders", "cluster": "embedded", "partitions": "3", "csrf": token}
    r = await browser.post("/ui/projects/shop/topics", data=form)
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects/shop/topics/orders"


async def test_create_topic_through_the_form_and_see_its_timeline(
    browser: httpx.AsyncClient,
) -> None:
    await _project_and_topic(browser)
    topic = (await browser.get("/v1/projects/shop/topics/orders", headers=API)).json()
    assert topic["segments"][0]["partitions"] == 3
    page = await browser.get("/ui/projects/shop/topics/orders")
    assert page.status_code == 200
    assert "created topic orders" in page.text  # the flash message after the redirect
    svg = re.search(r"<svg id=\"timeline\".*?</svg>", page.text, re.S)
    assert svg and svg.group(0).count('class="segment"') == 1
    assert "#1 embedded · active" in svg.group(0) and "embedded · 3 partition(s)" in svg.group(0)
    # With the cutover API the form is offered; without it the page says so (see test_ui_contracts).
    assert 'id="migrate"' in page.text or "Cutover is not available" in page.text
    listing = await browser.get("/ui/projects/shop/topics")
    assert 'href="/ui/projects/shop/topics/orders"' in listing.text and "1–1 of 1" in listing.text
    assert "No standby cluster: no automatic failover." in page.text
    update = {"version": topic["version"], "failover": {"clusters": ["embedded"]}}
    assert (
        await browser.put("/v1/projects/shop/topics/orders", json=update, headers=API)
    ).is_success
    page = await browser.get("/ui/projects/shop/topics/orders")
    assert "Failover (ordered) to embedded" in page.text


async def test_bad_topic_input_is_reported_and_creates_nothing(browser: httpx.AsyncClient) -> None:
    await _project_and_topic(browser)
    token = await csrf(browser)
    for form in (
        {"name": "orders", "partitions": "1"},  # exists
        {"name": "x", "partitions": "9999"},  # too many partitions
        {"name": "y", "partitions": "two"},
    ):
        r = await browser.post("/ui/projects/shop/topics", data={**form, "csrf": token})
        assert r.status_code == 303
        page = await browser.get(r.headers["location"])
        assert "not created:" in page.text, form
    names = [
        t["name"]
        for t in (await browser.get("/v1/projects/shop/topics", headers=API)).json()["items"]
    ]
    assert names == ["orders"]


async def test_invalid_filter_is_shown_inline_and_creates_nothing(
    browser: httpx.AsyncClient,
) -> None:
    await _project_and_topic(browser)
    token = await csrf(browser, "/ui/projects/shop/subscriptions/new")
    bad = {**SUB_FORM, "filter": 'headers["x"] ==', "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/new", data=bad)
    assert r.status_code == 422
    error = re.search(r'id="error-filter"[^>]*>([^<]*)<', r.text)
    assert error and "line 1, column 16" in error.group(1)
    assert 'headers["x"] ==' in r.text.replace("&#34;", '"')  # the typed filter is kept
    subs = (await browser.get("/v1/projects/shop/subscriptions", headers=API)).json()
    assert subs["items"] == []
    check = await browser.get("/ui/filter-check", params={"expression": 'headers["x"] =='})
    assert check.json()["ok"] is False and "column 16" in check.json()["problem"]


async def test_create_edit_pause_resume_a_subscription(browser: httpx.AsyncClient) -> None:
    await _project_and_topic(browser)
    token = await csrf(browser, "/ui/projects/shop/subscriptions/new")
    form = {**SUB_FORM, "filter": 'headers["x-region"] == "eu"', "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/new", data=form)
    assert r.status_code == 303, r.text[:2000]
    sub = (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()
    assert sub["retry"]["max_attempts"] == 3 and sub["retry"]["backoff"] == "linear"
    assert sub["max_in_flight"] == 7 and sub["filter"] == 'headers["x-region"] == "eu"'
    page = await browser.get("/ui/projects/shop/subscriptions/s1")
    assert 'id="status"' in page.text or 'id="status-missing"' in page.text

    edit = {**SUB_FORM, "max_in_flight": "not a number", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 422 and "must be a whole number" in r.text
    edit = {**SUB_FORM, "max_in_flight": "20000", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 422 and 'id="error-max_in_flight"' in r.text
    edit = {**SUB_FORM, "max_in_flight": "9", "filter": "", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 303
    sub = (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()
    assert sub["max_in_flight"] == 9 and sub["filter"] is None

    r = await browser.post("/ui/projects/shop/subscriptions/s1/pause", data={"csrf": token})
    assert r.status_code == 303
    assert (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()["paused"]
    r = await browser.post("/ui/projects/shop/subscriptions/s1/resume", data={"csrf": token})
    sub = (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()
    assert sub["paused"] is False
    listing = await browser.get("/ui/projects/shop/subscriptions")
    assert 'href="/ui/projects/shop/subscriptions/s1"' in listing.text


async def test_batches_and_a_dedupe_window_through_the_forms(browser: httpx.AsyncClient) -> None:
    await _project_and_topic(browser)
    token = await csrf(browser)
    form = {"name": "once", "cluster": "embedded", "dedupe_window": "10m", "csrf": token}
    r = await browser.post("/ui/projects/shop/topics", data=form)
    assert r.status_code == 303, r.text
    topic = (await browser.get("/v1/projects/shop/topics/once", headers=API)).json()
    assert topic["dedupe_window"] == "10m"
    assert "dedupe 10m" in (await browser.get("/ui/projects/shop/topics/once")).text
    form = {"name": "bad", "cluster": "embedded", "dedupe_window": "2d", "csrf": token}
    r = await browser.post("/ui/projects/shop/topics", data=form)
    assert "between 1s and 1d" in (await browser.get(r.headers["location"])).text

    token = await csrf(browser, "/ui/projects/shop/subscriptions/new")
    form = {**SUB_FORM, "batch_max_messages": "50", "batch_max_wait_ms": "20", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/new", data=form)
    assert r.status_code == 303, r.text[:2000]
    sub = (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()
    assert sub["batch"] == {"max_messages": 50, "max_bytes": 1024 * 1024, "max_wait_ms": 20}
    page = await browser.get("/ui/projects/shop/subscriptions/s1/edit")
    assert 'name="batch_max_messages" type="number" min="1" max="1000" value="50"' in page.text
    edit = {**SUB_FORM, "batch_max_messages": "5000", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 422 and 'id="error-batch_max_messages"' in r.text
    edit = {**SUB_FORM, "batch_max_messages": "", "csrf": token}  # off again
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 303
    sub = (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()
    assert sub["batch"] is None


async def test_the_delivery_format_through_the_form(browser: httpx.AsyncClient) -> None:
    await _project_and_topic(browser)
    token = await csrf(browser, "/ui/projects/shop/subscriptions/new")
    page = await browser.get("/ui/projects/shop/subscriptions/new")
    assert "<option selected>raw</option>" in page.text
    form = {**SUB_FORM, "delivery_format": "cloudevents-structured", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/new", data=form)
    assert r.status_code == 303, r.text[:2000]
    sub = (await browser.get("/v1/projects/shop/subscriptions/s1", headers=API)).json()
    assert sub["delivery_format"] == "cloudevents-structured"
    page = await browser.get("/ui/projects/shop/subscriptions/s1/edit")
    assert "<option selected>cloudevents-structured</option>" in page.text
    page = await browser.get("/ui/projects/shop/subscriptions/s1")
    assert '<span id="delivery-format">cloudevents-structured</span>' in page.text
    edit = {**SUB_FORM, "delivery_format": "cloudevents-binary", "batch_max_messages": "5"}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data={**edit, "csrf": token})
    assert r.status_code == 422 and "one event per request" in r.text
    edit = {**SUB_FORM, "delivery_format": "nonsense", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/s1/edit", data=edit)
    assert r.status_code == 422 and 'id="error-delivery_format"' in r.text


async def test_unknown_entities_get_a_page_not_a_crash(
    browser: httpx.AsyncClient,
) -> None:
    await _project_and_topic(browser)
    r = await browser.get("/ui/projects/shop/topics/nope")
    assert r.status_code == 404 and "Not found" in r.text
    r = await browser.get("/ui/projects/nope/subscriptions")
    assert r.status_code == 404
    r = await browser.get("/ui/projects/shop/subscriptions/nope/dlq")
    assert r.status_code in (200, 404) and "Traceback" not in r.text
    assert (await browser.get("/ui/audit")).status_code == 200


def _link(page: str, rel: str) -> str:
    found = re.search(rf'href="([^"]+)" rel="{rel}"', page)
    assert found, f"no {rel} link"
    return found.group(1).replace("&amp;", "&")


async def test_paging_links(browser: httpx.AsyncClient) -> None:
    await login(browser)
    for i in range(5):
        body = {"name": f"p{i}", "description": "the Ledger" if i == 3 else ""}
        r = await browser.post("/v1/projects", json=body, headers=API)
        assert r.status_code == 201
    page = (await browser.get("/ui/projects?limit=2")).text
    assert "1–2 of 5" in page and 'rel="prev"' not in page
    page = (await browser.get(_link(page, "next"))).text
    assert "3–4 of 5" in page and ">p2<" in page and ">p0<" not in page
    assert "3–4 of 5" not in (last := (await browser.get(_link(page, "next"))).text)
    assert "5–5 of 5" in last and 'rel="next"' not in last
    back = (await browser.get(_link(page, "prev"))).text
    assert "1–2 of 5" in back
    # an old bookmark by offset still opens its page
    assert "3–4 of 5" in (await browser.get("/ui/projects?offset=2&limit=2")).text
    # the search box: a GET form, the search kept by the pager's links
    assert 'class="search" role="search"' in page and 'name="q"' in page
    found = (await browser.get("/ui/projects", params={"q": "LEDGER"})).text
    assert ">p3<" in found and ">p1<" not in found and "matching" in found
    found = (await browser.get("/ui/projects", params={"q": "p", "limit": 2})).text
    assert "&q=p" in _link(found, "next")
    # a link whose cursor the API refuses: the first page, saying so
    r = await browser.get("/ui/projects", params={"cursor": "bogus!"})
    assert r.status_code == 200 and "not valid (any more)" in r.text and "1–5 of 5" in r.text


async def test_open_by_name_skips_the_paging(browser: httpx.AsyncClient) -> None:
    await _project_and_topic(browser)
    r = await browser.get("/ui/projects/shop/topics", params={"open": "orders"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects/shop/topics/orders"
    r = await browser.get("/ui/projects", params={"open": "shop"})
    assert r.status_code == 303 and r.headers["location"] == "/ui/projects/shop/topics"
    # Not there, or not a name: the list again, saying so (it used to say nothing).
    r = await browser.get("/ui/projects/shop/subscriptions", params={"open": "s9"})
    assert r.status_code == 200 and "No subscription named s9 here." in r.text
    r = await browser.get("/ui/projects/shop/topics", params={"open": "nope"})
    assert r.status_code == 200 and "No topic named nope here." in r.text
    r = await browser.get("/ui/projects", params={"open": "nope"})
    assert r.status_code == 200 and "No project named nope here." in r.text
    r = await browser.get("/ui/projects/shop/topics", params={"open": "../x"})
    assert r.status_code == 200 and "invalid name &#39;../x&#39;" in r.text


async def test_the_form_sets_where_a_subscription_starts(browser: httpx.AsyncClient) -> None:
    await _project_and_topic(browser)
    form_page = await browser.get("/ui/projects/shop/subscriptions/new")
    assert 'name="start"' in form_page.text and 'name="start_time"' in form_page.text
    token = await csrf(browser, "/ui/projects/shop/subscriptions/new")
    for name, start, at, wanted in (
        ("s1", "latest", "", "latest"),
        ("s2", "earliest", "", "earliest"),
        ("s3", "time", "2026-01-31T12:00", "2026-01-31T12:00:00Z"),
    ):
        form = {**SUB_FORM, "name": name, "start": start, "start_time": at, "csrf": token}
        r = await browser.post("/ui/projects/shop/subscriptions/new", data=form)
        assert r.status_code == 303, r.text[:2000]
        sub = (await browser.get(f"/v1/projects/shop/subscriptions/{name}", headers=API)).json()
        requested = sub["start"]["requested"]
        assert requested.replace("+00:00", "Z") == wanted, sub["start"]
    form = {**SUB_FORM, "name": "s4", "start": "time", "start_time": "", "csrf": token}
    r = await browser.post("/ui/projects/shop/subscriptions/new", data=form)
    assert r.status_code == 422 and 'id="error-start"' in r.text
    edit = await browser.get("/ui/projects/shop/subscriptions/s1/edit")
    assert 'name="start"' not in edit.text  # a start is chosen once, at create

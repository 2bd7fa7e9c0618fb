"""Users and roles in the web control plane, in real Chromium against a running ``httpbus
dev``: a viewer and an owner of ``shop`` log in by name and password, each sees only what
their role allows (projects, buttons, forms), and what they may not do is refused even when
they go to it by address. Screenshots for the README's tour."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Page, expect

from tests.support.dev import Dev, run_dev
from tests.support.ui import TOKEN, admin, needs_chromium, shot

pytestmark = needs_chromium
PASSWORDS = {"vic": "vic's long password", "olga": "olga's long password"}


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    data = tmp_path_factory.mktemp("ui-roles")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HTTPBUS_DATABASE_URL", f"sqlite:///{data / 'reports.db'}")
        with run_dev(data, TOKEN) as running:
            yield running


@pytest.fixture(scope="module")
def world(dev: Dev) -> Dev:
    """Projects shop (topic orders, subscription billing) and other; vic views shop, olga
    owns it."""
    with admin(dev) as api:
        for name in ("shop", "other"):
            assert api.post("/v1/projects", json={"name": name}).status_code == 201
        r = api.post("/v1/projects/shop/topics", json={"name": "orders", "partitions": 1})
        assert r.status_code == 201, r.text
        sub = {"name": "billing", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}
        r = api.post("/v1/projects/shop/subscriptions", json=sub)
        assert r.status_code == 201, r.text
        for user, role in (("vic", "viewer:shop"), ("olga", "owner:shop")):
            body = {"name": user, "password": PASSWORDS[user], "roles": [role]}
            r = api.post("/v1/users", json=body)
            assert r.status_code == 201, r.text
    return dev


def _log_in_as(page: Page, dev: Dev, user: str) -> None:
    page.goto(f"{dev.control_plane}/ui/projects")
    expect(page).to_have_url(re.compile(r"/ui/login\?next="))
    page.fill("#login-user input[name=user]", user)
    page.fill("#login-user input[name=password]", "not it")
    page.click("#login-as-user")
    expect(page.locator(".flash.error")).to_contain_text("do not match")
    page.fill("#login-user input[name=user]", user)
    page.fill("#login-user input[name=password]", PASSWORDS[user])
    page.click("#login-as-user")
    expect(page.locator("h1")).to_have_text("Projects")
    expect(page.locator("#who")).to_contain_text(user)


def _projects_listed(page: Page) -> list[str]:
    return page.locator("table.list tbody tr td:first-child a").all_inner_texts()


def test_a_viewer_sees_and_cannot_change(page: Page, world: Dev) -> None:
    base = world.control_plane
    _log_in_as(page, world, "vic")
    assert _projects_listed(page) == ["shop"]
    expect(page.locator("button:has-text('Create project')")).to_have_count(0)
    expect(page.locator("a[href='/ui/audit']")).to_have_count(0)
    page.goto(f"{base}/ui/projects/shop/topics")
    expect(page.locator("#topics")).to_contain_text("orders")
    expect(page.locator("#new-topic")).to_have_count(0)
    page.goto(f"{base}/ui/projects/shop/subscriptions")
    expect(page.locator("#subscriptions")).to_contain_text("billing")
    expect(page.locator("#new-subscription")).to_have_count(0)
    page.goto(f"{base}/ui/projects/shop/subscriptions/billing")
    expect(page.locator("#signing-secret")).to_contain_text("signing secret set")
    expect(page.locator("#delivered")).to_be_visible()
    for hidden in ("#pause-resume", "#seek", "#edit"):
        expect(page.locator(hidden)).to_have_count(0)
    assert "whsec_" not in page.content()
    shot(page, "roles-viewer-subscription")
    page.goto(f"{base}/ui/projects/shop/topics/orders")
    expect(page.locator("h1")).to_have_text("Topic shop/orders")
    for hidden in ("a:has-text('new subscription')", "#migrate"):
        expect(page.locator(hidden)).to_have_count(0)
    # Going by address to a form the role does not allow: the refusal, not the form (whose
    # save the API would refuse).
    for form in ("subscriptions/billing/edit", "subscriptions/new"):
        answer = page.goto(f"{base}/ui/projects/shop/{form}")
        assert answer is not None and answer.status == 403, form
        expect(page.locator("h1")).to_have_text("Refused")
        expect(page.locator(".error-message")).to_contain_text("this needs owner of shop")
        expect(page.locator("#sub-form")).to_have_count(0)
    page.goto(f"{base}/ui/projects/other/topics")
    expect(page.locator(".error-message")).to_contain_text("this needs viewer of other")
    with admin(world) as api:
        assert api.get("/v1/projects/shop/subscriptions/billing").json()["paused"] is False


def test_an_owner_changes_their_project_only(page: Page, world: Dev) -> None:
    base = world.control_plane
    _log_in_as(page, world, "olga")
    assert _projects_listed(page) == ["shop"]
    expect(page.locator("button:has-text('Create project')")).to_have_count(0)
    page.goto(f"{base}/ui/projects/shop/topics")
    page.fill("#new-topic input[name=name]", "events")
    page.click("#new-topic button[type=submit]")
    expect(page.locator("h1")).to_contain_text("events")
    page.goto(f"{base}/ui/projects/shop/subscriptions/new")
    expect(page.locator("#sub-form")).to_be_visible()
    page.goto(f"{base}/ui/projects/shop/subscriptions/billing")
    expect(page.locator("#edit")).to_be_visible()
    page.click("#edit")
    expect(page.locator("#sub-form")).to_be_visible()
    page.go_back()
    page.click("#pause-resume")
    expect(page.locator("#pause-resume")).to_have_text("Resume")
    shot(page, "roles-owner-subscription")
    with admin(world) as api:
        assert api.get("/v1/projects/shop/subscriptions/billing").json()["paused"] is True
        assert api.get("/v1/projects/shop/topics/events").status_code == 200
    page.goto(f"{base}/ui/projects/other/topics")
    expect(page.locator(".error-message")).to_contain_text("this needs viewer of other")

"""The users page (``/ui/users``, admins only): a page of users at a time by cursor, with
the pager and search box of the topics page, searched on the server by name or role."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.control_plane import ControlPlane, browser_control_plane
from tests.support.ui_pages import hidden, login

PASSWORD = "a long secret"
USERS = {f"u{i}": (PASSWORD, ["admin"] if i == 2 else []) for i in range(5)}


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with browser_control_plane(tmp_path, USERS) as built:
        yield built


def _link(page: str, rel: str) -> str:
    found = re.search(rf'href="([^"]+)" rel="{rel}"', page)
    assert found, f"no {rel} link"
    return found.group(1).replace("&amp;", "&")


def _names(page: str) -> list[str]:
    table = re.search(r'<table class="list" id="users">.*?</table>', page, re.S)
    assert table, page[:500]
    return re.findall(r"<tr><td>([^<]+)</td>", table.group(0))


async def test_users_page_by_cursor_and_search(cp: ControlPlane) -> None:
    browser = cp.client
    await login(browser)
    page = (await browser.get("/ui/users?limit=2")).text
    assert _names(page) == ["u0", "u1"] and "1–2 of 5" in page and 'rel="prev"' not in page
    assert 'id="nav-users"' in page and 'class="search" role="search"' in page
    assert 'class="open"' not in page  # a user has no page of its own to open
    page = (await browser.get(_link(page, "next"))).text
    assert _names(page) == ["u2", "u3"] and "3–4 of 5" in page
    assert "<td>admin</td>" in page and "no roles" in page
    last = (await browser.get(_link(page, "next"))).text
    assert _names(last) == ["u4"] and 'rel="next"' not in last
    assert _names((await browser.get(_link(last, "prev"))).text) == ["u2", "u3"]
    found = (await browser.get("/ui/users", params={"q": "ADMIN"})).text
    assert _names(found) == ["u2"] and "matching" in found
    found = (await browser.get("/ui/users", params={"q": "u", "limit": 2})).text
    assert "&q=u" in _link(found, "next")
    r = await browser.get("/ui/users", params={"cursor": "bogus!"})
    assert r.status_code == 200 and "not valid (any more)" in r.text
    assert _names(r.text) == list(USERS)


async def test_not_an_admin_is_refused_and_has_no_link(cp: ControlPlane) -> None:
    browser = cp.client
    page = await browser.get("/ui/login")
    form = {"user": "u3", "password": PASSWORD, "nonce": hidden(page.text, "nonce")}
    assert (await browser.post("/ui/login", data={**form, "next": "/ui/projects"})).is_redirect
    projects = await browser.get("/ui/projects")
    assert projects.status_code == 200 and 'id="nav-users"' not in projects.text
    r = await browser.get("/ui/users")
    assert r.status_code == 403 and "Traceback" not in r.text

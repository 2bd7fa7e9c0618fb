"""``httpbus user list``, ``user token list``, ``token list``, ``topic grant list`` and
``topic grant-request list`` page like ``topic list``: a page with the next page's command
under it, ``--cursor`` to go on, ``--all`` to walk every page (a filter kept), ``--search``
on the server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from control_plane.client import AdminClient
from tests.support.cli import (
    as_json,
    httpbus,
    next_command,
    ok,
    one_line_error,
    pages,
    shop_control_plane_url,
)

USERS = ["ann", "bob", "cyd", "dee", "eve"]
GRANTEES = ["p0", "p1", "p2"]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("cp")
    reports = f"sqlite:///{data / 'reports.db'}"  # users and grants: not in the cwd
    with shop_control_plane_url(data, database_url=reports) as base:
        for name in USERS:
            role = "owner:shop" if name == "dee" else "viewer:shop"
            made = httpbus(
                base,
                "user",
                "create",
                name,
                "--role",
                role,
                "--password-stdin",
                input="a long secret\n",
            )
            ok(made)
            ok(httpbus(base, "user", "token", "create", name, "--description", f"{name}'s laptop"))
        ok(httpbus(base, "user", "token", "create", "ann", "--description", "ann's CI"))
        for p in GRANTEES:
            ok(httpbus(base, "project", "create", p))
            ok(httpbus(base, "topic", "grant", "add", "shop", "orders", p))
        for i in range(3):
            ok(httpbus(base, "token", "create", "shop", "--description", f"producer {i}"))
        yield base


def test_a_page_of_users_prints_the_command_of_the_next_one(url: str) -> None:
    first, second, last = pages(url, "user", "list", "--limit", "2")
    assert "1–2 of 5" in first and "bob" in first and "cyd" not in first
    assert "3–4 of 5" in second and "cyd" in second and "eve" not in second
    assert "5–5 of 5" in last and "eve" in last


def test_all_walks_every_page_and_keeps_the_filter(url: str) -> None:
    users = as_json(httpbus(url, "user", "list", "--limit", "2", "--all", "-o", "json"))
    assert [u["name"] for u in users] == USERS
    tokens = as_json(
        httpbus(url, "user", "token", "list", "ann", "--limit", "1", "--all", "-o", "json")
    )
    assert sorted(t["description"] for t in tokens) == ["ann's CI", "ann's laptop"]
    every = as_json(httpbus(url, "user", "token", "list", "--limit", "2", "--all", "-o", "json"))
    assert len(every) == 6
    grants = ok(httpbus(url, "topic", "grant", "list", "shop", "orders", "--limit", "1", "--all"))
    assert "3 grant(s)" in grants and all(p in grants for p in GRANTEES)
    produce = as_json(httpbus(url, "token", "list", "shop", "--limit", "2", "--all", "-o", "json"))
    assert sorted(t["description"] for t in produce) == [f"producer {i}" for i in range(3)]


def test_search_on_the_server(url: str) -> None:
    owners = as_json(httpbus(url, "user", "list", "--search", "OWNER:", "-o", "json"))
    assert [u["name"] for u in owners["items"]] == ["dee"]
    text = ok(httpbus(url, "user", "token", "list", "-s", "laptop", "--limit", "3"))
    assert "3 matching 'laptop' on this page (6 in all)" in text
    assert "--search" in next_command(text)
    found = as_json(httpbus(url, "token", "list", "shop", "-s", "producer 1", "-o", "json"))
    assert [t["description"] for t in found["items"]] == ["producer 1"]
    none = ok(httpbus(url, "topic", "grant-request", "list", "shop", "orders", "-s", "x"))
    assert "0 matching 'x'" in none and "next page:" not in none


def test_a_cursor_not_given_by_the_api_is_refused(url: str) -> None:
    one_line_error(httpbus(url, "user", "list", "--cursor", "bogus!"), 1, "400", "cursor")


async def test_a_control_plane_from_before_paging_answers_one_page_of_its_array() -> None:
    """``--all`` against a control plane whose route answers the whole array (before it
    paged, the paging parameters ignored) walks it as one page."""
    asked: list[dict[str, str]] = []

    def old_route(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        return httpx.Response(200, json=[{"name": "ann"}, {"name": "bob"}])

    async with AdminClient("http://cp", "t", transport=httpx.MockTransport(old_route)) as api:
        pages = [page async for page in api.pages("/v1/users", {"limit": 1})]
    assert pages == [
        {"items": [{"name": "ann"}, {"name": "bob"}], "total": 2, "offset": 0, "next_cursor": None}
    ]
    assert asked == [{"limit": "1"}]

"""``httpbus project|topic|sub list``: a page with the next page's command under it,
``--cursor`` to go on, ``--all`` to walk every page, ``--search`` on the server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.cli import (
    as_json,
    embedded_control_plane_url,
    httpbus,
    next_command,
    ok,
    one_line_error,
    pages,
)

NAMES = [f"t{i:02d}" for i in range(7)]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        ok(httpbus(base, "project", "create", "shop", "--description", "the web shop"))
        ok(httpbus(base, "project", "create", "ads"))
        for name in NAMES:
            ok(httpbus(base, "topic", "create", "shop", name))
        ok(httpbus(base, "topic", "update", "shop", "t05", "--description", "Refund ledger"))
        hook = "http://127.0.0.1:9/hook"
        for sub in ("s1", "s2", "s3"):
            ok(httpbus(base, "sub", "create", "shop", sub, "--topic", "t01", "--endpoint", hook))
        yield base


def test_a_page_prints_the_command_of_the_next_one(url: str) -> None:
    first, second, last = pages(url, "topic", "list", "shop", "--limit", "3")
    assert "1–3 of 7" in first and "t02" in first and "t03" not in first
    assert "4–6 of 7" in second and "t03" in second and "t06" not in second
    assert "7–7 of 7" in last and "t06" in last


def test_all_walks_every_page_once(url: str) -> None:
    text = ok(httpbus(url, "topic", "list", "shop", "--limit", "2", "--all"))
    assert "7 topic(s)" in text
    assert [n for n in NAMES if n in text] == NAMES
    walked = as_json(httpbus(url, "topic", "list", "shop", "--limit", "2", "--all", "-o", "json"))
    assert [t["name"] for t in walked] == NAMES
    subs = as_json(httpbus(url, "sub", "list", "shop", "--limit", "1", "--all", "-o", "json"))
    assert [s["name"] for s in subs] == ["s1", "s2", "s3"]
    projects = as_json(httpbus(url, "project", "list", "--limit", "1", "--all", "-o", "json"))
    assert [p["name"] for p in projects] == ["ads", "shop"]


def test_search_on_the_server(url: str) -> None:
    found = as_json(httpbus(url, "topic", "list", "shop", "--search", "LEDGER", "-o", "json"))
    assert [t["name"] for t in found["items"]] == ["t05"]
    text = ok(httpbus(url, "topic", "list", "shop", "-s", "t0", "--limit", "4"))
    assert "4 matching 't0' on this page (7 in all)" in text
    assert next_command(text)[-4:-2] == ["--limit", "4"] and "--search" in next_command(text)
    rest = ok(httpbus(url, *next_command(text)))
    assert [n for n in NAMES if n in rest] == ["t04", "t05", "t06"]
    none = ok(httpbus(url, "sub", "list", "shop", "--search", "no-such"))
    assert "0 matching 'no-such'" in none and "next page:" not in none
    web = as_json(httpbus(url, "project", "list", "--search", "web", "-o", "json"))
    assert [p["name"] for p in web["items"]] == ["shop"]


def test_a_cursor_not_given_by_the_api_is_refused(url: str) -> None:
    one_line_error(httpbus(url, "topic", "list", "shop", "--cursor", "bogus!"), 1, "400", "cursor")


def test_the_deprecated_offset_still_pages(url: str) -> None:
    page = as_json(httpbus(url, "topic", "list", "shop", "--offset", "5", "-o", "json"))
    assert [t["name"] for t in page["items"]] == ["t05", "t06"]

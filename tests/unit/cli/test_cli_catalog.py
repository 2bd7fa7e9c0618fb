"""``httpbus catalog [--search]``, ``catalog show P/T`` and ``topic grant-request
create|list|approve|refuse`` against a real control plane (embedded backends, over HTTP in
this process): a team finds another's topic, asks for it, and the topic's owner approves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.cli import TOKEN, as_json, httpbus, ok, one_line_error, shop_control_plane_url

SCHEMA = '{"type": "object", "examples": [{"order": 7}]}'


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("cp")
    reports = f"sqlite:///{data / 'reports.db'}"  # users and grants: not in the cwd
    with shop_control_plane_url(data, database_url=reports) as base:
        ok(httpbus(base, "project", "create", "other"))
        ok(httpbus(base, "topic", "update", "shop", "orders", "--description", "Order events"))
        yield base


def _token(url: str, user: str, role: str) -> str:
    admin = {"Authorization": f"Bearer {TOKEN}"}
    body = {"name": user, "password": f"{user}'s secret", "roles": [role]}
    assert httpx.post(f"{url}/v1/users", json=body, headers=admin).status_code == 201
    r = httpx.post(f"{url}/v1/tokens", json={"user": user}, headers=admin)
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


def test_find_ask_and_approve(url: str, tmp_path: Path) -> None:
    olga = _token(url, "olga", "owner:other")
    sam = _token(url, "sam", "owner:shop")
    schema = tmp_path / "schema.json"
    schema.write_text(SCHEMA)
    ok(httpbus(url, "topic", "schema", "set", "shop", "orders", str(schema), token=sam))
    # Olga finds the topic by its description and reads its card.
    out = ok(httpbus(url, "catalog", "--search", "order ev", token=olga))
    assert "shop/orders" in out and "requestable" in out and "may ask as other" in out
    assert "1 topic(s)" in out
    assert "shop/orders" not in ok(httpbus(url, "catalog", "-s", "nothing-such", token=olga))
    card = ok(httpbus(url, "catalog", "show", "shop/orders", token=olga))
    assert "Order events" in card and "sam" in card and '{"order": 7}' in card
    assert "httpbus topic grant-request create shop orders --project other" in card
    usage = httpbus(url, "catalog", "show", "shop", token=olga)
    assert usage.exit_code == 2 and "give the topic as PROJECT/TOPIC" in usage.stderr
    one_line_error(httpbus(url, "catalog", "show", "shop/ghost", token=olga), 3, "404")
    # She asks; asking twice is a conflict; the owner lists it and approves.
    asked = httpbus(
        url, "topic", "grant-request", "create", "shop", "orders", "--project", "other",
        "--reason", "billing", token=olga,
    )  # fmt: skip
    assert "asked the owners of shop" in ok(asked) and "(pending)" in asked.stdout
    again = ("topic", "grant-request", "create", "shop", "orders", "--project", "other")
    one_line_error(httpbus(url, *again, token=olga), 4, "409", "pending")
    one_line_error(httpbus(url, "topic", "grant-request", "list", "shop", "orders", token=olga), 1)
    listed = ok(httpbus(url, "topic", "grant-request", "list", "shop", "orders", token=sam))
    assert "other" in listed and "pending" in listed and "billing" in listed
    pending = as_json(
        httpbus(url, "topic", "grant-request", "list", "shop", "orders", "--state", "pending",
                "-o", "json", token=sam)
    )  # fmt: skip
    assert [r["grantee"] for r in pending["items"]] == ["other"]
    out = ok(httpbus(url, "topic", "grant-request", "approve", "shop", "orders", "other",
                     "--note", "welcome", token=sam))  # fmt: skip
    assert out.strip() == "approved the request of other for shop/orders"
    entry = as_json(httpbus(url, "catalog", "show", "shop/orders", "-o", "json", token=olga))
    assert (entry["access"], entry["subscribe_as"]) == ("granted", ["other"])
    refused = ("topic", "grant-request", "refuse", "shop", "orders", "other")
    one_line_error(httpbus(url, *refused, token=sam), 4, "approved")
    card = ok(httpbus(url, "catalog", "show", "shop/orders", token=olga))
    assert "your request  as other: approved by user:sam: welcome" in card


def test_catalog_pages_with_a_cursor(url: str) -> None:
    for name in ("p1", "p2", "p3"):
        ok(httpbus(url, "topic", "create", "other", name))
    out = ok(httpbus(url, "catalog", "--limit", "2", "--search", "other/p"))
    assert "other/p1" in out and "other/p2" in out and "other/p3" not in out
    cursor = out.rsplit("--cursor ", 1)[1].strip()
    assert 'more: httpbus catalog --search "other/p" --cursor' in out
    out = ok(httpbus(url, "catalog", "--limit", "2", "--search", "other/p", "--cursor", cursor))
    assert "other/p3" in out and "more:" not in out
    one_line_error(httpbus(url, "catalog", "--cursor", "bogus"), 1, "400", "cursor")

"""The list routes that answered a whole JSON array before paging — users, API tokens, a
project's produce tokens, a topic's grants and grant requests — page by cursor and search
on the server when asked (``q``, ``cursor``, ``limit``), through the same listing helpers as
projects and topics, and answer the whole array as before when not asked."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane

GRANTEES = [f"p{i}" for i in range(5)]


@dataclass(frozen=True)
class Listed:
    """One list route: its URL, the key that names an item, the names it holds (sorted),
    a search and the names it finds."""

    url: str
    key: str
    names: list[str]
    q: str
    found: list[str]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, dict[str, Listed]]]:
    async with embedded_control_plane(tmp_path, database_url=f"sqlite:///{tmp_path}/r.db") as cp:
        c = cp.client
        await create_shop(c)
        for p in GRANTEES:
            assert (await c.post("/v1/projects", json={"name": p})).status_code == 201
        for i in range(5):
            role = ["owner:p3"] if i == 3 else []
            body = {"name": f"u{i}", "password": "correct horse", "roles": role}
            assert (await c.post("/v1/users", json=body)).status_code == 201, body
        api_tokens, produce_tokens = {}, {}
        for i in range(5):
            r = await c.post("/v1/tokens", json={"user": f"u{i}", "description": f"laptop {i}"})
            api_tokens[r.json()["id"]] = i
            body = {"topics": ["orders"], "description": "Nightly ETL" if i == 2 else f"app {i}"}
            r = await c.post("/v1/projects/shop/tokens", json=body)
            produce_tokens[r.json()["id"]] = i
        grants = "/v1/projects/shop/topics/orders/grants"
        for p in GRANTEES:
            assert (await c.post(grants, json={"project": p})).status_code == 201
        await c.post("/v1/projects/shop/topics", json={"name": "refunds"})
        requests = "/v1/projects/shop/topics/refunds/grant-requests"
        for p in GRANTEES:
            body = {"project": p, "reason": "We bill REFUNDS" if p == "p4" else "reports"}
            r = await c.post(requests, json=body)
            assert r.status_code == 201, r.text
        by_api = sorted(api_tokens)
        by_produce = sorted(produce_tokens)
        lists = {
            "users": Listed("/v1/users", "name", [f"u{i}" for i in range(5)], "OWNER:P3", ["u3"]),
            "api tokens": Listed(
                "/v1/tokens",
                "id",
                by_api,
                "laptop 1",
                [t for t in by_api if api_tokens[t] == 1],
            ),
            "produce tokens": Listed(
                "/v1/projects/shop/tokens",
                "id",
                by_produce,
                "etl",
                [t for t in by_produce if produce_tokens[t] == 2],
            ),
            "grants": Listed(grants, "grantee", GRANTEES, "P2", ["p2"]),
            "grant requests": Listed(requests, "grantee", GRANTEES, "refunds", ["p4"]),
        }
        yield cp, lists


ROUTES = ["users", "api tokens", "produce tokens", "grants", "grant requests"]


async def get(cp: ControlPlane, url: str, **params: Any) -> Any:
    r = await cp.client.get(url, params=params)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("route", ROUTES)
async def test_pages_by_cursor_search_whole_array_and_bad_cursors(
    world: tuple[ControlPlane, dict[str, Listed]], route: str
) -> None:
    cp, lists = world
    it = lists[route]
    await first_next_and_previous_page(cp, it)
    await search_on_the_server_any_case(cp, it)
    await without_paging_parameters_the_whole_array_as_before(cp, it)
    await a_cursor_the_api_did_not_give_is_a_400(cp, it)


async def first_next_and_previous_page(cp: ControlPlane, it: Listed) -> None:
    names = lambda page: [item[it.key] for item in page["items"]]  # noqa: E731
    first = await get(cp, it.url, limit=2)
    assert names(first) == it.names[:2]
    assert (first["total"], first["offset"], first["limit"], first["prev_cursor"]) == (
        5,
        0,
        2,
        None,
    )
    second = await get(cp, it.url, limit=2, cursor=first["next_cursor"])
    assert names(second) == it.names[2:4] and second["offset"] == 2
    last = await get(cp, it.url, limit=2, cursor=second["next_cursor"])
    assert names(last) == it.names[4:] and last["next_cursor"] is None
    back = await get(cp, it.url, limit=2, cursor=last["prev_cursor"])
    assert names(back) == it.names[2:4]
    back = await get(cp, it.url, limit=2, cursor=back["prev_cursor"])
    assert names(back) == it.names[:2] and back["prev_cursor"] is None


async def search_on_the_server_any_case(cp: ControlPlane, it: Listed) -> None:
    found = await get(cp, it.url, q=it.q)
    assert [item[it.key] for item in found["items"]] == it.found
    assert (found["total"], found["next_cursor"]) == (5, None)
    assert (await get(cp, it.url, q="no such text"))["items"] == []


async def without_paging_parameters_the_whole_array_as_before(cp: ControlPlane, it: Listed) -> None:
    whole = await get(cp, it.url)
    assert isinstance(whole, list)
    assert sorted(item[it.key] for item in whole) == it.names


BAD_CURSORS = ["not-a-cursor!", base64.urlsafe_b64encode(b"x:u1").decode(), "YTo"]


async def a_cursor_the_api_did_not_give_is_a_400(cp: ControlPlane, it: Listed) -> None:
    for bad in BAD_CURSORS:
        r = await cp.client.get(it.url, params={"cursor": bad})
        assert (r.status_code, r.json()["code"]) == (400, "malformed"), (bad, r.text)
        assert "start again without one" in r.json()["message"]


async def test_filters_and_pages_together(world: tuple[ControlPlane, dict[str, Listed]]) -> None:
    cp, lists = world
    mine = await get(cp, "/v1/tokens", user="u1", limit=10)
    assert [t["user"] for t in mine["items"]] == ["u1"] and mine["total"] == 1
    pending = await get(cp, lists["grant requests"].url, state="pending", limit=3)
    assert [r["grantee"] for r in pending["items"]] == GRANTEES[:3]
    r = await cp.client.get("/v1/users", params={"limit": 0})
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed")


async def test_the_openapi_documents_the_same_paging_parameters(
    world: tuple[ControlPlane, dict[str, Listed]],
) -> None:
    cp, lists = world
    assert cp.app is not None
    paths = cp.app.openapi()["paths"]

    def parameters(url: str) -> dict[str, Any]:
        found = paths[url]["get"]["parameters"]
        return {p["name"]: p.get("description") for p in found if p["in"] == "query"}

    topics = parameters("/v1/projects/{project}/topics")
    for url in (
        "/v1/users",
        "/v1/tokens",
        "/v1/projects/{project}/tokens",
        "/v1/projects/{project}/topics/{topic}/grants",
        "/v1/projects/{project}/topics/{topic}/grant-requests",
    ):
        mine = parameters(url)
        for name in ("q", "cursor", "offset", "limit"):
            assert mine[name] == topics[name], (url, name)

"""The topic catalog (issue 39 item 3): who sees which topic across projects and roles, search,
cursors, the entry's fields, and grant requests from asking to approval or refusal; on the
embedded backend with a SQLite relational store."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane

HOOK = {"url": "http://127.0.0.1:9/hook"}
SCHEMA = {
    "type": "object",
    "properties": {"order": {"type": "integer"}},
    "required": ["order"],
    "examples": [{"order": 42}],
}
Headers = dict[str, str]


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(tmp_path, database_url=f"sqlite:///{tmp_path}/r.db") as cp:
        await create_shop(cp.client)
        c = cp.client
        for name in ("other", "third"):
            assert (await c.post("/v1/projects", json={"name": name})).status_code == 201
        body = {"name": "invoices", "partitions": 1, "description": "Billing events, monthly"}
        assert (await c.post("/v1/projects/shop/topics", json=body)).status_code == 201
        body = {"name": "audit", "partitions": 1, "description": "who did what"}
        assert (await c.post("/v1/projects/other/topics", json=body)).status_code == 201
        r = await c.put("/v1/projects/shop/topics/orders/schema", json={"schema": SCHEMA})
        assert r.status_code in (200, 201), r.text
        yield cp


async def user(cp: ControlPlane, name: str, *roles: str) -> Headers:
    body = {"name": name, "password": f"{name}'s secret", "roles": list(roles)}
    assert (await cp.client.post("/v1/users", json=body)).status_code == 201
    r = await cp.client.post("/v1/tokens", json={"user": name})
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def listing(cp: ControlPlane, who: Headers | None = None, **params: Any) -> dict[str, Any]:
    r = await cp.client.get("/v1/catalog", params=params, headers=who)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def keys(page: dict[str, Any]) -> list[str]:
    return [f"{e['project']}/{e['topic']}" for e in page["items"]]


def by_key(page: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f"{e['project']}/{e['topic']}": e for e in page["items"]}


async def test_visibility_follows_roles_and_grants(cp: ControlPlane) -> None:
    c = cp.client
    vera = await user(cp, "vera", "viewer:other")
    olga = await user(cp, "olga", "owner:other")
    nobody = await user(cp, "nobody")
    await user(cp, "sam", "owner:shop")
    everything = ["other/audit", "shop/invoices", "shop/orders"]
    # An admin sees every topic as its own; the owners are the project's owning users.
    admin = by_key(await listing(cp))
    assert sorted(admin) == everything
    assert {e["access"] for e in admin.values()} == {"own"}
    assert admin["shop/orders"]["owners"] == ["sam"]
    assert admin["shop/orders"]["subscribe_as"] == ["shop"]
    # A viewer of other only, who owns nothing, cannot ask for a grant: other's topics only.
    assert keys(await listing(cp, vera)) == ["other/audit"]
    seen = by_key(await listing(cp, vera))["other/audit"]
    assert (seen["access"], seen["subscribe_as"], seen["request_as"]) == ("own", [], [])
    r = await c.get("/v1/catalog/shop/orders", headers=vera)
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    # An owner of other sees its own topics, and shop's as topics it may ask for.
    olgas = by_key(await listing(cp, olga))
    assert sorted(olgas) == everything
    assert olgas["other/audit"]["subscribe_as"] == ["other"]
    assert olgas["shop/orders"]["access"] == "requestable"
    assert (olgas["shop/orders"]["subscribe_as"], olgas["shop/orders"]["request_as"]) == (
        [],
        ["other"],
    )
    # Without a role anywhere: nothing.
    assert (await listing(cp, nobody))["items"] == []
    # A machine token owning a project sees as an owning user does (and is no "owner" shown).
    r = await c.post("/v1/tokens", json={"roles": ["owner:third"], "description": "ci"})
    machine = {"Authorization": f"Bearer {r.json()['token']}"}
    seen = by_key(await listing(cp, machine))["shop/orders"]
    assert (seen["access"], seen["request_as"], seen["owners"]) == (
        "requestable",
        ["third"],
        ["sam"],
    )
    # shop grants orders to other: the viewer of other now sees it, as granted.
    assert (
        await c.post("/v1/projects/shop/topics/orders/grants", json={"project": "other"})
    ).status_code == 201
    assert keys(await listing(cp, vera)) == ["other/audit", "shop/orders"]
    granted = by_key(await listing(cp, vera))["shop/orders"]
    assert (granted["access"], granted["subscribe_as"]) == ("granted", [])
    granted = by_key(await listing(cp, olga))["shop/orders"]
    assert (granted["access"], granted["subscribe_as"], granted["request_as"]) == (
        "granted",
        ["other"],
        [],
    )
    assert by_key(await listing(cp))["shop/orders"]["subscribe_as"] == ["other", "shop"]


async def test_entry_fields_schema_example_and_subscribers(cp: ControlPlane) -> None:
    c = cp.client
    body = {"name": "mailer", "topic": "orders", "endpoint": HOOK}
    assert (await c.post("/v1/projects/shop/subscriptions", json=body)).status_code == 201
    entry = by_key(await listing(cp))["shop/orders"]
    assert entry["subscribers"] == 1
    assert entry["example"] == {"order": 42}
    assert entry["schema"]["version"] == 1
    assert entry["schema"]["link"] == "/v1/projects/shop/topics/orders/schema/versions/1"
    assert entry["schema"]["document"] is None  # in the one-topic entry only
    assert (await c.get(entry["schema"]["link"])).status_code == 200
    shown = (await c.get("/v1/catalog/shop/orders")).json()
    assert shown["schema"]["document"] == SCHEMA
    plain = by_key(await listing(cp))["shop/invoices"]
    assert (plain["schema"], plain["example"], plain["subscribers"]) == (None, None, 0)
    assert plain["description"] == "Billing events, monthly"
    r = await c.get("/v1/catalog/shop/ghost")
    assert (r.status_code, r.json()["code"]) == (404, "not_found")


async def test_search_and_cursor_pages(cp: ControlPlane) -> None:
    olga = await user(cp, "olga", "owner:other")
    await user(cp, "sam", "owner:shop")
    assert keys(await listing(cp, olga, q="BILLING")) == ["shop/invoices"]  # description
    assert keys(await listing(cp, olga, q="shop/ord")) == ["shop/orders"]  # project/topic
    assert keys(await listing(cp, olga, q="sam")) == ["shop/invoices", "shop/orders"]  # owner
    assert (await listing(cp, olga, q="nothing-like-this"))["items"] == []
    # One a page: the cursors walk every topic once, in order.
    walked: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 1} | ({"cursor": cursor} if cursor else {})
        page = await listing(cp, olga, **params)
        walked += keys(page)
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert walked == ["other/audit", "shop/invoices", "shop/orders"]
    # Searching pages too.
    first = await listing(cp, olga, q="shop", limit=1)
    assert keys(first) == ["shop/invoices"] and first["next_cursor"]
    second = await listing(cp, olga, q="shop", limit=1, cursor=first["next_cursor"])
    assert (keys(second), second["next_cursor"]) == (["shop/orders"], None)
    for bad in ("not-a-cursor", base64.urlsafe_b64encode(b"no-slash").decode()):
        r = await cp.client.get("/v1/catalog", params={"cursor": bad})
        assert (r.status_code, r.json()["code"]) == (400, "malformed")
    r = await cp.client.get("/v1/catalog", params={"limit": 0})
    assert r.status_code == 422


async def test_a_grant_request_approved_lets_the_requester_subscribe(cp: ControlPlane) -> None:
    c = cp.client
    olga = await user(cp, "olga", "owner:other")
    sam = await user(cp, "sam", "owner:shop")
    vera = await user(cp, "vera", "viewer:other")
    url = "/v1/projects/shop/topics/orders/grant-requests"
    ask = {"project": "other", "reason": "we bill orders"}
    # Refusals, each with its code and what to fix.
    r = await c.post(url, json=ask, headers=vera)  # cannot see the topic
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    r = await c.post(url, json={"project": "shop"}, headers=sam)
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed")
    assert "own topics need no grant" in r.json()["message"]
    r = await c.post(url, json={"project": "ghost"}, headers=olga)
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed")
    r = await c.post(url, json={"project": "third"}, headers=olga)
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    assert "owner of third" in r.json()["message"]
    r = await c.post(url, json={"project": "other", "reason": "x" * 1001}, headers=olga)
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed")
    # Asked once: pending, seen by the topic's owners and by the requester's entry.
    r = await c.post(url, json=ask, headers=olga)
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["state"], made["requested_by"], made["reason"]) == (
        "pending",
        "user:olga",
        "we bill orders",
    )
    r = await c.post(url, json=ask, headers=olga)
    assert (r.status_code, r.json()["code"]) == (409, "already_exists")
    assert (await c.get(url, headers=olga)).status_code == 403  # not an owner of shop
    listed = (await c.get(url, headers=sam, params={"state": "pending"})).json()
    assert [(x["grantee"], x["state"]) for x in listed] == [("other", "pending")]
    entry = by_key(await listing(cp, olga))["shop/orders"]
    assert (entry["pending_requests"], entry["request_as"]) == (["other"], [])
    assert by_key(await listing(cp, sam))["shop/orders"]["pending_requests"] == ["other"]
    # The owner approves: the grant exists and other's owner subscribes.
    r = await c.post(f"{url}/other/approve", json={"note": "welcome"}, headers=sam)
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["decided_by"], r.json()["note"]) == (
        "approved",
        "user:sam",
        "welcome",
    )
    grants = (await c.get("/v1/projects/shop/topics/orders/grants")).json()
    assert [g["grantee"] for g in grants] == ["other"]
    body = {"name": "biller", "topic": "shop/orders", "endpoint": HOOK}
    r = await c.post("/v1/projects/other/subscriptions", json=body, headers=olga)
    assert r.status_code == 201, r.text
    entry = by_key(await listing(cp, olga))["shop/orders"]
    assert (entry["access"], entry["pending_requests"], entry["subscribers"]) == (
        "granted",
        [],
        1,
    )
    # Decided once; asking again while granted is refused too.
    r = await c.post(f"{url}/other/refuse", headers=sam)
    assert (r.status_code, r.json()["code"]) == (409, "already_exists")
    r = await c.post(url, json=ask, headers=olga)
    assert (r.status_code, r.json()["code"]) == (409, "already_exists")


async def test_a_refused_request_can_be_made_again(cp: ControlPlane) -> None:
    c = cp.client
    tina = await user(cp, "tina", "owner:third")
    sam = await user(cp, "sam", "owner:shop")
    url = "/v1/projects/shop/topics/invoices/grant-requests"
    assert (await c.post(url, json={"project": "third"}, headers=tina)).status_code == 201
    r = await c.post(f"{url}/third/refuse", json={"note": "not yet"}, headers=sam)
    assert (r.status_code, r.json()["state"]) == (200, "refused")
    entry = (await c.get("/v1/catalog/shop/invoices", headers=tina)).json()
    assert [(x["grantee"], x["state"], x["note"]) for x in entry["your_requests"]] == [
        ("third", "refused", "not yet")
    ]
    assert (entry["pending_requests"], entry["request_as"]) == ([], ["third"])
    assert (await c.get("/v1/catalog/shop/invoices", headers=sam)).json()["your_requests"] == []
    assert (await c.post(f"{url}/third/approve", headers=sam)).status_code == 409
    assert (await c.get("/v1/projects/shop/topics/invoices/grants")).json() == []
    r = await c.post(url, json={"project": "third", "reason": "now?"}, headers=tina)
    assert (r.status_code, r.json()["state"], r.json()["note"]) == (201, "pending", "")
    r = await c.post(f"{url}/nobody/approve", headers=sam)
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    # A deleted topic takes its requests: made again, it has none.
    assert (await c.delete("/v1/projects/shop/topics/invoices")).status_code == 204
    r = await c.post("/v1/projects/shop/topics", json={"name": "invoices", "partitions": 1})
    assert r.status_code == 201
    assert (await c.get(url)).json() == []

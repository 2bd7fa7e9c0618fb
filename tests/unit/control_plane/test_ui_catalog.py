"""The catalog's pages (issue 39 item 3): a user who owns one project searches the catalog,
opens another project's topic, requests access; the topic's owner sees the request on the
topic's page and approves it; a viewer who owns nothing sees neither the topic nor the form."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane
from tests.support.ui_pages import TOKEN, csrf, hidden

API = {"Authorization": f"Bearer {TOKEN}"}
SCHEMA = {"type": "object", "examples": [{"order": 1}]}


@dataclass
class World:
    cp: ControlPlane
    tmp_path: Path


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with embedded_control_plane(
        tmp_path,
        admin=False,
        base_url="http://testserver",
        database_url=f"sqlite:///{tmp_path}/r.db",
    ) as cp:
        c = cp.client
        await create_shop(c, headers=API)
        assert (await c.post("/v1/projects", json={"name": "other"}, headers=API)).is_success
        for name, role in (
            ("olga", "owner:other"),
            ("sam", "owner:shop"),
            ("vera", "viewer:other"),
        ):
            body = {"name": name, "password": f"{name}'s secret", "roles": [role]}
            assert (await c.post("/v1/users", json=body, headers=API)).status_code == 201
        r = await c.put(
            "/v1/projects/shop/topics/orders/schema", json={"schema": SCHEMA}, headers=API
        )
        assert r.is_success, r.text
        yield World(cp, tmp_path)


async def as_user(world: World, name: str) -> httpx.AsyncClient:
    """A browser of its own, logged in as ``name``."""
    assert world.cp.app is not None
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=world.cp.app), base_url="http://testserver"
    )
    page = await client.get("/ui/login")
    r = await client.post(
        "/ui/login",
        data={
            "user": name,
            "password": f"{name}'s secret",
            "nonce": hidden(page.text, "nonce"),
            "next": "/ui/catalog",
        },
    )
    assert r.status_code == 303, r.text[:500]
    return client


async def test_search_request_and_approve_in_the_pages(world: World) -> None:
    olga = await as_user(world, "olga")
    sam = await as_user(world, "sam")
    vera = await as_user(world, "vera")
    page = await olga.get("/ui/catalog", params={"q": "shop/ord"})
    assert page.status_code == 200
    assert 'href="/ui/catalog"' in page.text  # in the header's nav
    assert 'data-topic="shop/orders"' in page.text and "may ask as other" in page.text
    assert "No topic matches" in (await olga.get("/ui/catalog", params={"q": "zzz"})).text
    card = await olga.get("/ui/catalog/shop/orders")
    assert card.status_code == 200
    assert (
        "sam" in card.text
        and "&#34;order&#34;: 1" in card.text
        and 'id="request-access"' in card.text
    )
    # The viewer who owns nothing sees neither the topic nor a form.
    assert 'data-topic="shop/orders"' not in (await vera.get("/ui/catalog")).text
    assert (await vera.get("/ui/catalog/shop/orders")).status_code == 404
    # Olga asks; the card then says it is pending and offers no second form.
    token = await csrf(olga, "/ui/catalog/shop/orders")
    r = await olga.post(
        "/ui/catalog/shop/orders/request",
        data={"csrf": token, "project": "other", "reason": "billing"},
    )
    assert r.status_code == 303
    card = await olga.get("/ui/catalog/shop/orders")
    assert "asked the owners of shop" in card.text and "pending request of other" in card.text
    assert 'id="request-access"' not in card.text
    r = await olga.post("/ui/catalog/shop/orders/request", data={"csrf": token, "project": "other"})
    assert "not requested" in (await olga.get(r.headers["location"])).text
    # Sam sees it on the topic's page (olga, not an owner of shop, sees no such list).
    topic_page = await sam.get("/ui/projects/shop/topics/orders")
    assert 'data-grantee="other"' in topic_page.text and "billing" in topic_page.text
    token = await csrf(sam, "/ui/projects/shop/topics/orders")
    r = await sam.post(
        "/ui/projects/shop/topics/orders/grant-requests/other/approve",
        data={"csrf": token, "note": "welcome"},
    )
    assert r.status_code == 303
    after = await sam.get(r.headers["location"])
    assert "approved the request of other" in after.text and "No pending request" in after.text
    card = await olga.get("/ui/catalog/shop/orders")
    assert "may subscribe as other" in card.text and 'id="subscribe"' in card.text
    assert "Your request as other was approved by user:sam: “welcome”." in card.text
    assert "topic=shop%2Forders" in card.text
    r = await sam.post(
        "/ui/projects/shop/topics/orders/grant-requests/other/refuse", data={"csrf": token}
    )
    assert "not refused" in (await sam.get(r.headers["location"])).text
    for client in (olga, sam, vera):
        await client.aclose()

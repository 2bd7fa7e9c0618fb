"""Who may do what (issue 19): every admin route of the OpenAPI, walked with every role.

The expected need of each route is read from docs/security.md's table, which must equal the
needs the routes declare (one test), so a route added without a check, or a check changed
without the doc, fails here. The walk sends every route with: the admin token, an admin user,
an owner of the route's project, a machine token owning it, an owner of another project, a
viewer of the project, and no credential. An allowed call must not be 401/403 (nor 5xx); a
refused one is 403 (401 without a credential). No answer to a viewer holds a secret or a
token.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.api.auth import route_table
from tests.support.control_plane import (
    AUTH,
    SHOP_PATH_VALUES,
    ControlPlane,
    create_shop,
    embedded_control_plane,
    fill_path,
)
from tests.support.layout import ROOT

SECURITY = ROOT / "docs" / "security.md"
SECRET = "whsec_" + "QUFB" * 8
# Reads name what exists (SHOP_PATH_VALUES). Changes name what does not exist (or send an
# empty body), so an allowed call is a 404 or a 422 and the walk never destroys the world it
# walks in.
WRITE_PARAMS = {
    **SHOP_PATH_VALUES,
    "topic": "ghost",
    "subscription": "ghost",
    "user": "ghost",
    "grantee": "ghost",
}


@dataclass(frozen=True)
class Caller:
    name: str
    headers: dict[str, str]
    allowed: frozenset[str]  # the needs it meets on a route of project shop
    status_refused: int = 403


def _doc_table() -> list[tuple[str, str, str]]:
    text = SECURITY.read_text()
    block = text.split("<!-- route-roles:start -->")[1].split("<!-- route-roles:end -->")[0]
    rows = re.findall(r"^\| (\w+) \| `([^`]+)` \| (\w+) \|$", block, re.M)
    return [(m, p, n) for m, p, n in rows]


async def _token(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, str]:
    r = await client.post("/v1/tokens", json=body)
    assert r.status_code == 201, r.text
    return {"Authorization": f"Bearer {r.json()['token']}"}


async def _user(client: httpx.AsyncClient, name: str, roles: list[str]) -> dict[str, str]:
    r = await client.post(
        "/v1/users", json={"name": name, "password": "pw-" + name * 3, "roles": roles}
    )
    assert r.status_code == 201, r.text
    return await _token(client, {"user": name})


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, list[Caller]]]:
    async with embedded_control_plane(tmp_path, database_url=f"sqlite:///{tmp_path}/r.db") as cp:
        c = cp.client
        await create_shop(c)
        assert (await c.post("/v1/projects", json={"name": "other"})).status_code == 201
        sub = {"name": "billing", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/h"}}
        r = await c.post("/v1/projects/shop/subscriptions", json={**sub, "signing_secret": SECRET})
        assert r.status_code == 201, r.text
        assert (await c.post("/v1/projects/shop/tokens", json={})).status_code == 201
        r = await c.post("/v1/projects/shop/topics/orders/grants", json={"project": "other"})
        assert r.status_code == 201, r.text
        callers = [
            Caller("admin token", AUTH, frozenset({"any", "viewer", "owner", "admin"})),
            Caller(
                "admin user",
                await _user(c, "ada", ["admin"]),
                frozenset({"any", "viewer", "owner", "admin"}),
            ),
            Caller(
                "owner of shop",
                await _user(c, "olga", ["owner:shop"]),
                frozenset({"any", "viewer", "owner"}),
            ),
            Caller(
                "machine owning shop",
                await _token(c, {"roles": ["owner:shop"]}),
                frozenset({"any", "viewer", "owner"}),
            ),
            Caller("owner of other", await _user(c, "otto", ["owner:other"]), frozenset({"any"})),
            Caller(
                "viewer of shop",
                await _user(c, "vic", ["viewer:shop"]),
                frozenset({"any", "viewer"}),
            ),
            Caller("no credential", {"Authorization": ""}, frozenset(), 401),
        ]
        yield cp, callers


async def test_the_doc_table_is_the_routes_needs(world: tuple[ControlPlane, list[Caller]]) -> None:
    cp, _ = world
    assert cp.app is not None
    declared = route_table(cp.app.openapi())
    assert all(need != "MISSING" for _, _, need in declared), declared
    expected = "".join(f"| {m} | `{p}` | {n} |\n" for m, p, n in declared)
    assert _doc_table() == declared, f"docs/security.md's table should read:\n{expected}"


def _request(method: str, path: str) -> tuple[str, dict[str, Any] | None]:
    url = fill_path(path) if method == "GET" else fill_path(path, WRITE_PARAMS)
    return url, ({} if method in ("POST", "PUT") else None)


async def test_every_route_with_every_role(world: tuple[ControlPlane, list[Caller]]) -> None:
    cp, callers = world
    rows = _doc_table()
    assert len(rows) >= 50  # every admin route: the walk below is not over an empty list
    seen_ok: dict[str, int] = {}
    for method, path, need in rows:
        url, body = _request(method, path)
        for caller in callers:
            # The secret-rotating and DLQ-purging writes name a ghost: 404 when allowed.
            r = await cp.client.request(method, url, json=body, headers=caller.headers)
            where = f"{caller.name}: {method} {url} (needs {need}) -> {r.status_code} {r.text}"
            if need in caller.allowed:
                assert r.status_code not in (401, 403) and r.status_code < 500, where
                if method == "GET" and r.status_code == 200:
                    seen_ok[caller.name] = seen_ok.get(caller.name, 0) + 1
            else:
                assert r.status_code == caller.status_refused, where
                assert r.json()["code"] == ("forbidden" if r.status_code == 403 else "unauthorized")
            if caller.name == "viewer of shop":
                assert "whsec_" not in r.text and "hbp." not in r.text, where
                assert "hbk." not in r.text and 'signing_secret"' not in r.text, where
    # The reads answered with content, so the secret check above saw real answers.
    assert seen_ok["viewer of shop"] >= 12, seen_ok
    assert seen_ok["admin token"] > seen_ok["viewer of shop"], seen_ok


async def test_a_refusal_says_what_is_needed(world: tuple[ControlPlane, list[Caller]]) -> None:
    cp, callers = world
    viewer = next(c for c in callers if c.name == "viewer of shop")
    r = await cp.client.delete("/v1/projects/shop/topics/orders", headers=viewer.headers)
    assert r.status_code == 403
    assert r.json()["message"] == "this needs owner of shop; user:vic holds viewer of shop"
    other = next(c for c in callers if c.name == "owner of other")
    r = await cp.client.get("/v1/projects/nowhere", headers=other.headers)
    assert r.status_code == 403  # not 404: an owner learns nothing of other projects


async def test_projects_list_shows_only_the_callers(
    world: tuple[ControlPlane, list[Caller]],
) -> None:
    cp, callers = world
    by = {c.name: c for c in callers}
    names = lambda r: [p["name"] for p in r.json()["items"]]  # noqa: E731
    assert names(await cp.client.get("/v1/projects")) == ["other", "shop"]
    r = await cp.client.get("/v1/projects", headers=by["viewer of shop"].headers)
    assert names(r) == ["shop"]
    r = await cp.client.get("/v1/projects", headers=by["owner of other"].headers)
    assert names(r) == ["other"]

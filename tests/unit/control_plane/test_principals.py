"""The principals of the admin API (users, API tokens, roles) and consent for subscriptions
to another project's topic, on the embedded backend with a SQLite relational store."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from reports.models import ApiTokenRow, UserRow
from reports.principals import PrincipalStore
from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane

HOOK = {"url": "http://127.0.0.1:9/hook"}


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(tmp_path, database_url=f"sqlite:///{tmp_path}/r.db") as cp:
        await create_shop(cp.client)
        assert (await cp.client.post("/v1/projects", json={"name": "other"})).status_code == 201
        yield cp


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def _token_of(cp: ControlPlane, user: str) -> dict[str, str]:
    r = await cp.client.post("/v1/tokens", json={"user": user, "description": "laptop"})
    assert r.status_code == 201, r.text
    return bearer(r.json()["token"])


async def test_users_roles_and_their_tokens(cp: ControlPlane, tmp_path: Path) -> None:
    c = cp.client
    r = await c.post(
        "/v1/users", json={"name": "alice", "password": "correct horse", "roles": ["viewer:shop"]}
    )
    assert (r.status_code, r.json()["roles"]) == (201, ["viewer:shop"])
    assert "password" not in r.text
    r = await c.post("/v1/users", json={"name": "alice", "password": "another one"})
    assert (r.status_code, r.json()["code"]) == (409, "already_exists")
    alice = await _token_of(cp, "alice")
    me = (await c.get("/v1/me", headers=alice)).json()
    assert me == {"kind": "user", "name": "alice", "roles": ["viewer:shop"]}
    # A viewer reads, and cannot change.
    assert (await c.get("/v1/projects/shop/topics", headers=alice)).status_code == 200
    r = await c.delete("/v1/projects/shop/topics/orders", headers=alice)
    assert (r.status_code, r.json()["code"]) == (403, "forbidden")
    # Granted owner, the same token may change at its next request; revoked, it may not.
    r = await c.put("/v1/users/alice/roles/owner:shop")
    assert r.json()["roles"] == ["owner:shop", "viewer:shop"]
    body = {"name": "audit", "topic": "orders", "endpoint": HOOK}
    r = await c.post("/v1/projects/shop/subscriptions", json=body, headers=alice)
    assert r.status_code == 201, r.text
    r = await c.delete("/v1/users/alice/roles/owner:shop")
    assert r.json()["roles"] == ["viewer:shop"]
    r = await c.delete("/v1/projects/shop/subscriptions/audit", headers=alice)
    assert r.status_code == 403
    # Listing shows tokens and users, never a token or a hash.
    listed = await c.get("/v1/tokens", params={"user": "alice"})
    assert [(t["user"], t["description"], t["roles"]) for t in listed.json()] == [
        ("alice", "laptop", ["viewer:shop"])
    ]
    assert "hbk." not in listed.text and "sha256" not in listed.text
    users = (await c.get("/v1/users")).json()
    assert [(u["name"], u["roles"]) for u in users] == [("alice", ["viewer:shop"])]
    assert "hash" not in str(users)
    # Only hashes are stored: argon2id for the password, SHA-256 for the token.
    store = PrincipalStore.from_url(f"sqlite:///{tmp_path}/r.db")
    with store.engine.connect() as conn:
        hashed = conn.execute(select(UserRow.password_hash)).scalar_one()
        token_hash = conn.execute(select(ApiTokenRow.sha256)).scalar_one()
    assert hashed.startswith("$argon2id$") and "correct horse" not in hashed
    assert len(token_hash) == 64
    # A deleted user's tokens die with them.
    assert (await c.delete("/v1/users/alice")).status_code == 204
    r = await c.get("/v1/me", headers=alice)
    assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
    assert (await c.get("/v1/users/alice")).status_code == 404
    store.engine.dispose()


async def test_passwords_log_in_and_can_be_changed(cp: ControlPlane, tmp_path: Path) -> None:
    c = cp.client
    r = await c.post("/v1/users", json={"name": "bob", "password": "first password"})
    assert r.status_code == 201
    store = PrincipalStore.from_url(f"sqlite:///{tmp_path}/r.db")
    assert store.login("bob", "first password") is not None
    assert store.login("bob", "wrong password") is None
    assert store.login("nobody", "first password") is None
    r = await c.put("/v1/users/bob/password", json={"password": "second password"})
    assert r.status_code == 204
    assert store.login("bob", "first password") is None
    assert store.login("bob", "second password") is not None
    store.engine.dispose()


async def test_machine_tokens_hold_their_own_roles_and_are_revoked(cp: ControlPlane) -> None:
    c = cp.client
    r = await c.post("/v1/tokens", json={"roles": ["owner:shop"], "description": "ci"})
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["token"].startswith("hbk.") and created["user"] is None
    ci = bearer(created["token"])
    assert (await c.get("/v1/me", headers=ci)).json() == {
        "kind": "token",
        "name": created["id"],
        "roles": ["owner:shop"],
    }
    assert (await c.get("/v1/projects/other", headers=ci)).status_code == 403
    assert (await c.delete(f"/v1/tokens/{created['id']}")).status_code == 204
    assert (await c.get("/v1/projects/shop", headers=ci)).status_code == 401
    r = await c.delete(f"/v1/tokens/{created['id']}")
    assert (r.status_code, r.json()["code"]) == (404, "not_found")


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/users", {"name": "x", "password": "short"}, "password"),
        ("/v1/users", {"name": "x y", "password": "long enough"}, "name"),
        ("/v1/users", {"name": "x", "password": "long enough", "roles": ["boss"]}, "roles"),
        ("/v1/users", {"name": "x", "password": "long enough", "roles": ["owner:nope"]}, "roles"),
        ("/v1/tokens", {}, "roles"),
        ("/v1/tokens", {"user": "x", "roles": ["admin"]}, "roles"),
        ("/v1/tokens", {"roles": ["viewer:"]}, "roles"),
        ("/v1/projects/shop/topics/orders/grants", {"project": "nope"}, "project"),
        ("/v1/projects/shop/topics/orders/grants", {}, "project"),
    ],
)
async def test_bad_input_is_422_naming_the_field(
    cp: ControlPlane, path: str, body: dict[str, object], field: str
) -> None:
    r = await cp.client.post(path, json=body)
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed"), r.text
    assert field in r.json()["message"], r.text


async def test_a_token_for_an_unknown_user_is_404(cp: ControlPlane) -> None:
    r = await cp.client.post("/v1/tokens", json={"user": "ghost"})
    assert (r.status_code, r.json()["code"]) == (404, "not_found")
    r = await cp.client.put("/v1/users/ghost/roles/admin")
    assert (r.status_code, r.json()["code"]) == (404, "not_found")


# ------------------------------------------------------------------ consent


async def test_a_subscription_to_another_projects_topic_needs_a_grant(cp: ControlPlane) -> None:
    c = cp.client
    body = {"name": "spy", "topic": "shop/orders", "endpoint": HOOK}
    r = await c.post("/v1/projects/other/subscriptions", json=body)
    assert (r.status_code, r.json()["code"]) == (403, "grant_required")
    message = r.json()["message"]
    assert "ask an owner of shop to grant it to other" in message
    assert "POST /v1/projects/shop/topics/orders/grants" in message
    # The topic's owner grants it; an owner of the subscribing project cannot.
    await c.post(
        "/v1/users", json={"name": "otto", "password": "otto's secret", "roles": ["owner:other"]}
    )
    otto = await _token_of(cp, "otto")
    grant = {"project": "other"}
    r = await c.post("/v1/projects/shop/topics/orders/grants", json=grant, headers=otto)
    assert r.status_code == 403
    r = await c.post("/v1/projects/shop/topics/orders/grants", json=grant)
    assert (r.status_code, r.json()["grantee"]) == (201, "other")
    listed = (await c.get("/v1/projects/shop/topics/orders/grants")).json()
    assert [g["grantee"] for g in listed] == ["other"]
    r = await c.post("/v1/projects/other/subscriptions", json=body, headers=otto)
    assert r.status_code == 201, r.text
    assert (r.json()["topic_project"], r.json()["topic"]) == ("shop", "orders")
    # Removed, no new subscription; the one made stays.
    r = await c.delete("/v1/projects/shop/topics/orders/grants/other")
    assert r.status_code == 204
    r = await c.post("/v1/projects/other/subscriptions", json={**body, "name": "spy2"})
    assert r.status_code == 403
    assert (await c.get("/v1/projects/other/subscriptions/spy")).status_code == 200
    r = await c.delete("/v1/projects/shop/topics/orders/grants/other")
    assert (r.status_code, r.json()["code"]) == (404, "not_found")


async def test_a_deleted_topic_takes_its_grants(cp: ControlPlane) -> None:
    c = cp.client
    r = await c.post("/v1/projects/shop/topics", json={"name": "temp", "partitions": 1})
    assert r.status_code == 201
    r = await c.post("/v1/projects/shop/topics/temp/grants", json={"project": "other"})
    assert r.status_code == 201
    assert (await c.delete("/v1/projects/shop/topics/temp")).status_code == 204
    r = await c.post("/v1/projects/shop/topics", json={"name": "temp", "partitions": 1})
    assert r.status_code == 201
    assert (await c.get("/v1/projects/shop/topics/temp/grants")).json() == []


async def test_own_topics_need_no_grant(cp: ControlPlane) -> None:
    body = {"name": "mine", "topic": "shop/orders", "endpoint": HOOK}
    r = await cp.client.post("/v1/projects/shop/subscriptions", json=body)
    assert r.status_code == 201, r.text

"""The ``auth`` setting of subscriptions through the admin API (issue 40 item 4): what is
accepted and refused (422 ``validation_failed`` naming the field), write-only fields masked
on every read and kept when sent back masked, the JWKS public and the signing keys' routes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from tests.support.auth_doubles import TestCA
from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane

SUBS = "/v1/projects/shop/subscriptions"
OAUTH = {
    "type": "oauth2_client_credentials",
    "token_url": "https://id.example.com/oauth/token",
    "client_id": "httpbus",
    "client_secret": "sekret-client-9f1",
    "audience": "https://api.example.com",
}


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(
        tmp_path,
        database_url=f"sqlite:///{tmp_path / 'reports.db'}",
        jwt_signing={"issuer": "https://cp.example", "publish_lead_s": 600},
    ) as built:
        await create_shop(built.client)
        yield built


def _sub(name: str, auth: dict[str, Any], url: str = "https://hooks.example.com/in") -> Any:
    return {"name": name, "topic": "orders", "endpoint": {"url": url}, "auth": auth}


def _field(r: httpx.Response) -> str:
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["code"] == "validation_failed", body
    return str(body["message"])


async def _update(c: httpx.AsyncClient, name: str, **changes: Any) -> httpx.Response:
    shown = (await c.get(f"{SUBS}/{name}")).json()
    keep = (
        "endpoint filter retry dlq_enabled max_in_flight rate_limit_per_second "
        "circuit_breaker delay_ms paused description batch delivery_format auth version"
    ).split()
    return await c.put(f"{SUBS}/{name}", json={**{k: shown[k] for k in keep}, **changes})


async def test_no_auth_is_the_default(cp: ControlPlane) -> None:
    body = {"name": "plain", "topic": "orders", "endpoint": {"url": "https://h.example.com"}}
    r = await cp.client.post(SUBS, json=body)
    assert r.status_code == 201 and r.json()["auth"] == {"type": "none"}


async def test_oauth_secret_is_write_only_and_kept_when_sent_back_masked(
    cp: ControlPlane,
) -> None:
    c = cp.client
    r = await c.post(SUBS, json=_sub("o", OAUTH))
    assert r.status_code == 201, r.text
    assert r.json()["auth"] == {**OAUTH, "client_secret": "********", "scope": None}
    listed = (await c.get(SUBS)).json()["items"][0]
    assert "sekret-client" not in str(listed)
    assert (await _update(c, "o", description="kept")).status_code == 200
    revealed = (await c.post(f"{SUBS}/o/secret:reveal")).json()
    assert revealed["auth_secrets"] == {"client_secret": "sekret-client-9f1"}
    # A new value replaces it; a mask where nothing of the kind is stored is refused.
    shown = (await c.get(f"{SUBS}/o")).json()
    r = await _update(c, "o", auth={**shown["auth"], "client_secret": "rotated-secret"})
    assert r.status_code == 200, r.text
    revealed = (await c.post(f"{SUBS}/o/secret:reveal")).json()
    assert revealed["auth_secrets"] == {"client_secret": "rotated-secret"}
    r = await c.post(SUBS, json=_sub("o2", {**OAUTH, "client_secret": "********"}))
    assert _field(r).startswith("auth.client_secret:")


async def test_refusals_name_the_field(cp: ControlPlane) -> None:
    c = cp.client
    metadata = {**OAUTH, "token_url": "http://169.254.169.254/token"}
    assert _field(await c.post(SUBS, json=_sub("a", metadata))).startswith("auth.token_url:")
    assert "auth" in _field(await c.post(SUBS, json=_sub("b", {"type": "kerberos"})))
    missing = {k: v for k, v in OAUTH.items() if k != "client_id"}
    assert "client_id" in _field(await c.post(SUBS, json=_sub("c", missing)))
    ca, other = TestCA.make(), TestCA.make("other CA")
    client = ca.issue("worker", server=False)
    mtls = {"type": "mtls", "client_cert": client.cert_pem, "client_key": client.key_pem}
    http = _sub("d", mtls, url="http://hooks.example.com/in")
    assert "https endpoint" in _field(await c.post(SUBS, json=http))
    wrong_key = {**mtls, "client_key": other.issue("x", server=False).key_pem}
    assert "not the key of client_cert" in _field(await c.post(SUBS, json=_sub("e", wrong_key)))
    half = {"type": "mtls", "client_cert": client.cert_pem}
    assert "go together" in _field(await c.post(SUBS, json=_sub("f", half)))
    assert "PEM certificates" in _field(
        await c.post(SUBS, json=_sub("g", {"type": "mtls", "ca": "not a pem"}))
    )
    assert "or ca" in _field(await c.post(SUBS, json=_sub("h", {"type": "mtls"})))


async def test_mtls_key_is_masked_and_a_ca_alone_is_accepted(cp: ControlPlane) -> None:
    c = cp.client
    ca = TestCA.make()
    client = ca.issue("worker", server=False)
    mtls = {"type": "mtls", "client_cert": client.cert_pem, "client_key": client.key_pem}
    r = await c.post(SUBS, json=_sub("m", mtls))
    assert r.status_code == 201, r.text
    assert r.json()["auth"]["client_key"] == "********"
    assert (await _update(c, "m", description="kept")).status_code == 200
    revealed = (await c.post(f"{SUBS}/m/secret:reveal")).json()
    assert revealed["auth_secrets"] == {"client_key": client.key_pem}
    r = await c.post(SUBS, json=_sub("ca", {"type": "mtls", "ca": ca.pem}))
    assert r.status_code == 201 and r.json()["auth"]["client_cert"] is None


async def test_a_jwt_subscription_makes_the_first_key_and_the_jwks_is_public(
    cp: ControlPlane,
) -> None:
    c = cp.client
    assert (await c.get("/v1/signing-keys")).json()["keys"] == []  # none until asked for
    r = await c.post(SUBS, json=_sub("j", {"type": "jwt", "audience": "urn:hooks"}))
    assert r.status_code == 201, r.text
    anonymous = httpx.AsyncClient(transport=c._transport, base_url=str(c.base_url))
    async with anonymous:
        jwks = await anonymous.get("/.well-known/jwks.json")
        assert (await anonymous.get("/v1/signing-keys")).status_code == 401
    assert jwks.status_code == 200 and "max-age=300" in jwks.headers["cache-control"]
    [first] = jwks.json()["keys"]
    assert first["alg"] == "ES256" and "d" not in first
    jwt.PyJWKSet.from_dict(jwks.json())  # PyJWT reads it
    shown = (await c.get("/v1/signing-keys")).json()
    assert shown["issuer"] == "https://cp.example" and shown["keys"][0]["signing"]
    # A rotation publishes the next key now; it signs after the lead.
    r = await c.post("/v1/signing-keys:rotate", json={"lead_s": 120})
    assert r.status_code == 200, r.text
    old, new = r.json()["keys"]
    assert old["signing"] and not new["signing"]
    assert len((await c.get("/.well-known/jwks.json")).json()["keys"]) == 2
    assert _field(await c.post("/v1/signing-keys:rotate", json={"lead_s": -1}))

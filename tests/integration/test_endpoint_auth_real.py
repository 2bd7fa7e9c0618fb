"""Endpoint authentication (subscription ``auth``) on real ZooKeeper and Kafka, delivered by
a worker process, configured through the control plane's API served over HTTP in the test
process (on the same metastore):

- ``jwt``: a receiver checks every delivery's JWT with PyJWT against the control plane's
  ``/.well-known/jwks.json``, refreshing its copy only every few seconds (no refetch on an
  unknown ``kid``: the strictest cache the publish lead promises to serve); the signing key
  is rotated mid-stream;
- ``oauth2_client_credentials``: a token server double issues tokens that expire every two
  seconds, and the client secret is changed mid-stream by an update of the subscription;
- ``mtls``: a TLS receiver (uvicorn, ``ssl_cert_reqs=CERT_REQUIRED``) takes only clients
  with a certificate of the test CA, and has a server certificate of that CA (the custom CA).

Each keeps deliveries flowing with no failed attempt: every request the receiver got was
accepted, and the worker's own count of failed attempts is 0."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from core.endpoint_auth import MtlsAuth
from core.model import Endpoint, Subscription
from delivery_workers.http_sender import HttpSender
from delivery_workers.sender import Delivery
from metastore import paths
from segments.protocol import Record, Stored
from tests.support.auth_doubles import (
    AsgiReceiver,
    TestCA,
    serve_asgi,
    serve_receiver,
    serve_token_server,
)
from tests.support.hook import SECRET
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
TOKEN = "test-admin-token-0123456789"
EVERY_S = 0.05  # one message produced every 50 ms while a stream runs
LEAD_S = 4  # a new signing key is published this long before it signs
CACHE_S = 2  # the JWT receiver refreshes its JWKS this often, never on an unknown kid
ISSUER = "https://httpbus.test"


@dataclass
class ControlPlane:
    url: str
    api: httpx.AsyncClient


@pytest.fixture
async def world(
    real_services: RealServices, unique: str, tmp_path: Path
) -> AsyncIterator[ProcessWorld]:
    async with process_world(real_services, unique, tmp_path) as built:
        yield built


@pytest.fixture
async def cp(world: ProcessWorld, tmp_path: Path) -> AsyncIterator[ControlPlane]:
    """The control plane on the world's metastore and Kafka, served over HTTP (receivers
    fetch its JWKS), with its elected roles (the assigner among them)."""
    app = world.control_plane_app(
        TOKEN,
        assign_interval_s=0.5,
        database_url=f"sqlite:///{tmp_path / 'reports.db'}",
        jwt_signing={"issuer": ISSUER, "publish_lead_s": LEAD_S, "retain_s": 60},
    )
    async with app.router.lifespan_context(app), serve_asgi(app) as port:
        url = f"http://127.0.0.1:{port}"
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as api:
            yield ControlPlane(url, api)


async def _subscribe(cp: ControlPlane, name: str, url: str, auth: dict[str, Any]) -> dict[str, Any]:
    body = {"name": name, "topic": "orders", "endpoint": {"url": url}, "auth": auth}
    r = await cp.api.post("/v1/projects/shop/subscriptions", json=body)
    assert r.status_code == 201, r.text
    return dict(r.json())


class Stream:
    """Messages produced every :data:`EVERY_S` until stopped."""

    def __init__(self, world: ProcessWorld) -> None:
        self.world = world
        self.produced: list[str] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Stream:
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while not self._stop.is_set():
            mid = f"m{len(self.produced)}"
            record = Record(mid.encode(), headers=(("x-message-id", mid.encode()),))
            await self.world.store.produce(self.world.storage, record)
            self.produced.append(mid)
            await asyncio.sleep(EVERY_S)

    async def __aexit__(self, *exc: object) -> None:
        self._stop.set()
        assert self._task is not None
        await self._task


async def _totals(world: ProcessWorld, name: str) -> dict[str, int]:
    node = await world.meta.get(paths.unit_status(f"shop/{name}"))
    return {} if node is None else dict(json.loads(node.data)["totals"])


async def _no_failed_attempt(world: ProcessWorld, name: str, delivered: int) -> dict[str, int]:
    """The worker's figures once they count ``delivered``: they must count no failure."""

    async def reported() -> dict[str, int] | None:
        totals = await _totals(world, name)
        return totals if totals.get("delivered", 0) >= delivered else None

    totals = await until(reported, 30, f"the worker's status of {name}", interval=0.2)
    assert totals["failed"] == 0, totals
    return totals


# ------------------------------------------------------------ jwt


class JwtReceiverCheck:
    """A receiver's check of the delivery JWT with PyJWT, its JWKS refreshed every
    :data:`CACHE_S` and never on an unknown ``kid``."""

    def __init__(self, jwks_url: str, audience: str) -> None:
        self.jwks_url, self.audience = jwks_url, audience
        self.keys: jwt.PyJWKSet | None = None
        self.fetched = 0.0
        self.claims: list[dict[str, Any]] = []
        self.kids: list[str] = []
        self.problems: list[str] = []

    async def __call__(self, headers: Mapping[str, str]) -> bool:
        if self.keys is None or time.monotonic() - self.fetched >= CACHE_S:
            async with httpx.AsyncClient() as client:
                r = await client.get(self.jwks_url)  # no credential: a public document
            r.raise_for_status()
            self.keys, self.fetched = jwt.PyJWKSet.from_dict(r.json()), time.monotonic()
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        try:
            kid = jwt.get_unverified_header(token)["kid"]
            key = self.keys[kid]
            claims = jwt.decode(
                token,
                key.key,
                algorithms=["ES256", "RS256"],
                audience=self.audience,
                issuer=ISSUER,
                options={"require": ["exp", "iat", "jti", "sub", "iss", "aud"]},
            )
        except (jwt.PyJWTError, KeyError) as exc:
            self.problems.append(f"{type(exc).__name__}: {exc}")
            return False
        self.claims.append(claims)
        self.kids.append(kid)
        return scheme == "Bearer"


async def test_jwt_deliveries_verify_against_the_jwks_through_a_key_rotation(
    world: ProcessWorld, cp: ControlPlane, unique: str
) -> None:
    check = JwtReceiverCheck(f"{cp.url}/.well-known/jwks.json", "")
    async with serve_receiver(check) as receiver:
        check.audience = receiver.url_for("jwt")
        created = await _subscribe(cp, "jwt", receiver.url_for("jwt"), {"type": "jwt"})
        assert created["auth"] == {"type": "jwt", "audience": None}
        [worker] = world.workers([f"w-{unique}"], commit_every_s=0.2, lock_retry_s=0.2)
        await worker.ready()
        async with Stream(world) as stream:
            await until(lambda: len(receiver.accepted("jwt")) >= 20, 60, "deliveries")
            r = await cp.api.post("/v1/signing-keys:rotate", json={})
            assert r.status_code == 200, r.text
            rotated_at = time.time()
            old, new = r.json()["keys"]
            assert old["signing"] and not new["signing"]
            await until(lambda: check.kids.count(new["kid"]) >= 20, LEAD_S + 60, "new key")
        await until(lambda: set(stream.produced) <= set(receiver.accepted("jwt")), 60, "every one")
        totals = await _no_failed_attempt(world, "jwt", len(stream.produced))
        listed = (await cp.api.get("/v1/signing-keys")).json()["keys"]
    assert receiver.refused("jwt") == [] and check.problems == []
    first_new = next(
        r.at for r, kid in zip(receiver.got, check.kids, strict=True) if kid == new["kid"]
    )
    assert first_new - rotated_at >= LEAD_S - 1, "the new key signed before its lead"
    assert {c["sub"] for c in check.claims} == {"shop/jwt"}
    assert len({c["jti"] for c in check.claims}) == len(check.claims)
    assert all(c["exp"] - c["iat"] == 300 for c in check.claims)
    # After the rotation both keys are published: the old one retain_s more.
    assert [k["kid"] for k in listed] == [old["kid"], new["kid"]]
    assert listed[0]["stopped_at"] is not None and listed[1]["signing"]
    print(
        f"\n{len(stream.produced)} messages, {totals['delivered']} delivered, "
        f"{check.kids.count(old['kid'])} signed by the old key, "
        f"{check.kids.count(new['kid'])} by the new; first new-key delivery "
        f"{first_new - rotated_at:.1f} s after the rotation (lead {LEAD_S} s)"
    )


# ------------------------------------------------------------ oauth2


async def test_oauth_tokens_expiring_mid_stream_and_a_changed_client_secret_keep_flowing(
    world: ProcessWorld, cp: ControlPlane, unique: str
) -> None:
    async with (
        serve_token_server({"httpbus": ["first-secret"]}, expires_in=2) as tokens,
        serve_receiver(tokens.bearer_ok) as receiver,
    ):
        auth = {
            "type": "oauth2_client_credentials",
            "token_url": tokens.url,
            "client_id": "httpbus",
            "client_secret": "first-secret",
            "scope": "hooks:write",
        }
        created = await _subscribe(cp, "oauth", receiver.url_for("oauth"), auth)
        assert created["auth"]["client_secret"] == "********"
        [worker] = world.workers([f"w-{unique}"], commit_every_s=0.2, lock_retry_s=0.2)
        await worker.ready()
        async with Stream(world) as stream:
            # Tokens live 2 s: within 6 s several expire while messages flow.
            await until(lambda: len(tokens.issued) >= 3, 60, "three tokens, one after another")
            # The secret's rotation: the server takes both, the subscription moves to the
            # new one (sent back as read, the mask keeps nothing: a new value), then the old
            # one is withdrawn (its tokens revoked).
            tokens.clients["httpbus"].append("second-secret")
            sub = (await cp.api.get("/v1/projects/shop/subscriptions/oauth")).json()
            assert sub["auth"]["client_secret"] == "********"
            body = _update_body(sub, auth={**sub["auth"], "client_secret": "second-secret"})
            r = await cp.api.put("/v1/projects/shop/subscriptions/oauth", json=body)
            assert r.status_code == 200, r.text
            await until(
                lambda: any(i.secret == "second-secret" for i in tokens.issued),
                30,
                "a token fetched with the new secret",
            )
            tokens.clients["httpbus"].remove("first-secret")
            after = len(receiver.accepted("oauth"))
            await until(lambda: len(receiver.accepted("oauth")) >= after + 40, 60, "more")
        await until(
            lambda: set(stream.produced) <= set(receiver.accepted("oauth")), 60, "every one"
        )
        totals = await _no_failed_attempt(world, "oauth", len(stream.produced))
        # A masked secret sent back keeps the stored one (the update above did not mask it).
        again = (await cp.api.get("/v1/projects/shop/subscriptions/oauth")).json()
        r = await cp.api.put("/v1/projects/shop/subscriptions/oauth", json=_update_body(again))
        assert r.status_code == 200, r.text
        revealed = (await cp.api.post("/v1/projects/shop/subscriptions/oauth/secret:reveal")).json()
        assert revealed["auth_secrets"] == {"client_secret": "second-secret"}
    assert receiver.refused("oauth") == []
    assert all(form.get("scope") == "hooks:write" for form in tokens.forms)
    print(
        f"\n{len(stream.produced)} messages, {totals['delivered']} delivered, "
        f"{len(tokens.issued)} tokens of 2 s each, no failed attempt"
    )


def _update_body(sub: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A PUT body from what a GET showed (the settings and the version), with ``changes``."""
    settings = (
        "endpoint filter retry dlq_enabled max_in_flight rate_limit_per_second "
        "circuit_breaker delay_ms paused description batch delivery_format auth version"
    ).split()
    return {**{k: sub[k] for k in settings}, **changes}


# ------------------------------------------------------------ mtls


@asynccontextmanager
async def tls_receiver(tmp_path: Path, ca: TestCA) -> AsyncIterator[tuple[AsgiReceiver, str]]:
    """A receiver that requires a client certificate of ``ca``, with a server certificate
    of ``ca`` for localhost: its URL."""
    cert, key = ca.issue("localhost", server=True).write(tmp_path, "server")
    ca_file = tmp_path / "ca.pem"
    ca_file.write_text(ca.pem)
    app = AsgiReceiver()
    options = {
        "ssl_certfile": str(cert),
        "ssl_keyfile": str(key),
        "ssl_ca_certs": str(ca_file),
        "ssl_cert_reqs": ssl.CERT_REQUIRED,
    }
    async with serve_asgi(app, **options) as port:
        yield app, f"https://localhost:{port}/hook"


async def test_mtls_presents_the_client_certificate_and_trusts_the_custom_ca(
    world: ProcessWorld, cp: ControlPlane, unique: str, tmp_path: Path
) -> None:
    ca = TestCA.make()
    client = ca.issue("httpbus-worker", server=False)
    async with (
        tls_receiver(tmp_path, ca) as (receiver, url),
    ):
        # The receiver really refuses a client without a certificate (only the CA set).
        alone = MtlsAuth(type="mtls", ca=ca.pem)
        full = MtlsAuth(
            type="mtls", client_cert=client.cert_pem, client_key=client.key_pem, ca=ca.pem
        )
        async with HttpSender() as sender:
            refused = await sender.send(_delivery(f"{url}/probe", alone))
            accepted = await sender.send(_delivery(f"{url}/probe", full))
        assert not refused.succeeded and refused.status is None, refused
        assert accepted.succeeded, accepted
        auth = {"type": "mtls", "client_cert": client.cert_pem, "client_key": client.key_pem}
        bad = await cp.api.post(
            "/v1/projects/shop/subscriptions",
            json={
                "name": "m",
                "topic": "orders",
                "endpoint": {"url": f"{url}/m"},
                "auth": {**auth, "client_key": ca.issue("other", server=False).key_pem},
            },
        )
        assert bad.status_code == 422 and "client_key" in bad.text, bad.text
        created = await _subscribe(cp, "mtls", f"{url}/mtls", {**auth, "ca": ca.pem})
        assert created["auth"]["client_key"] == "********"
        assert created["auth"]["client_cert"] == client.cert_pem
        [worker] = world.workers([f"w-{unique}"], commit_every_s=0.2, lock_retry_s=0.2)
        await worker.ready()
        async with Stream(world) as stream:
            await until(lambda: len(receiver.accepted("mtls")) >= 40, 60, "deliveries")
        await until(lambda: set(stream.produced) <= set(receiver.accepted("mtls")), 60, "every one")
        totals = await _no_failed_attempt(world, "mtls", len(stream.produced))
    print(f"\n{len(stream.produced)} messages over mTLS, {totals['delivered']} delivered")


def _delivery(url: str, auth: MtlsAuth) -> Delivery:
    sub = Subscription(
        project="shop",
        name="probe",
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url=url, timeout_ms=5_000),
        signing_secret=SECRET,
        auth=auth,
    )
    return Delivery(
        sub, "shop/orders", Stored(partition=0, position=1, timestamp_ms=1, value=b"{}")
    )

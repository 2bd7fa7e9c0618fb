"""The control plane in the test process on the embedded metastore and store, served to an
``httpx.AsyncClient`` through ASGI (no socket).

    async with embedded_control_plane(tmp_path) as cp:
        r = await cp.client.post("/v1/projects", json={"name": "shop"})
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import SegmentStore

TOKEN = "test-admin-token-0123456789"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class ControlPlane:
    client: httpx.AsyncClient
    meta: EmbeddedMetaStore
    store: SegmentStore  # the one the app was given (``wrap`` of the embedded store)
    app: FastAPI | None = None

    @property
    def catalog(self) -> Catalog:
        return Catalog(self.meta)


@asynccontextmanager
async def embedded_control_plane(
    tmp_path: Path,
    *,
    admin: bool = True,
    base_url: str = "http://cp",
    wrap: Callable[[SegmentStore], Any] = lambda store: store,
    **settings: Any,
) -> AsyncIterator[ControlPlane]:
    """The app with ``settings`` (admin token :data:`TOKEN`); its client sends the admin
    token unless ``admin`` is false (a browser logs in instead). ``wrap`` may stand a double
    in front of the store."""
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "segments.db"))
    config = ControlPlaneSettings(admin_token=TOKEN, clusters={"embedded": cluster}, **settings)
    async with EmbeddedMetaStore(str(tmp_path / "meta.db")) as meta, create_store(cluster) as st:
        store = wrap(st)
        app = create_app(config, metastore=meta, stores={"embedded": store})
        transport = httpx.ASGITransport(app=app)
        headers = AUTH if admin else {}
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(transport=transport, base_url=base_url, headers=headers) as client,
        ):
            yield ControlPlane(client, meta, store, app)


@asynccontextmanager
async def browser_control_plane(
    tmp_path: Path, users: dict[str, tuple[str, list[str]]]
) -> AsyncIterator[ControlPlane]:
    """A control plane a browser signs in to (its client sends no token; reports in SQLite),
    with ``users``: name → (password, roles), made by the admin."""
    async with embedded_control_plane(
        tmp_path,
        admin=False,
        base_url="http://testserver",
        database_url=f"sqlite:///{tmp_path / 'reports.db'}",
    ) as built:
        for name, (password, roles) in users.items():
            body = {"name": name, "password": password, "roles": roles}
            r = await built.client.post("/v1/users", json=body, headers=AUTH)
            assert r.status_code == 201, r.text
        yield built


@asynccontextmanager
async def app_client(
    app: FastAPI, base_url: str = "http://cp", token: str = TOKEN, timeout: float = 5.0
) -> AsyncIterator[httpx.AsyncClient]:
    """``app`` started (its lifespan) and a client of it through ASGI that sends ``token`` as
    a bearer (the admin token unless told), waiting ``timeout`` seconds for an answer."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(
            transport=transport, base_url=base_url, headers=headers, timeout=timeout
        ) as client:
            yield client


def json_of(r: httpx.Response, status: int = 200) -> dict[str, Any]:
    """The JSON object an answer carries, once its status is ``status`` (else the test fails
    with the answer's text)."""
    assert r.status_code == status, r.text
    found: dict[str, Any] = r.json()
    return found


async def asgi_client(stack: AsyncExitStack, app: FastAPI, base_url: str) -> httpx.AsyncClient:
    """:func:`app_client` (the admin token) ended with ``stack``: for a world of several apps."""
    return await stack.enter_async_context(app_client(app, base_url))


async def create_shop(
    client: httpx.AsyncClient, *, headers: dict[str, str] | None = None, **topic: Any
) -> None:
    """Project ``shop`` and its topic ``orders`` (one partition unless ``topic`` says; a
    field given as None is left to the API's default), sent with ``headers`` if given (as
    from a browser's client that is not logged in: the admin token)."""
    r = await client.post("/v1/projects", json={"name": "shop"}, headers=headers)
    assert r.status_code == 201, r.text
    fields = {"name": "orders", "partitions": 1, **topic}
    body = {k: v for k, v in fields.items() if v is not None}
    r = await client.post("/v1/projects/shop/topics", json=body, headers=headers)
    assert r.status_code == 201, r.text


# The path parameters of a walk over every route of the API and the UI in a shop world: the
# names the walking tests create (topic ``orders``, subscription ``billing``, user ``vic``),
# so the reads of what a test made answer with content.
SHOP_PATH_VALUES = {
    "project": "shop",
    "topic": "orders",
    "subscription": "billing",
    "sub": "billing",  # the UI's name for it
    "message_id": "m-1",
    "group": "g-1",
    "run_id": "1",
    "user": "vic",
    "token_id": "0123456789ab",
    "grantee": "other",
    "role": "viewer:shop",
    "version": "1",
}


def fill_path(path: str, values: Mapping[str, str] = SHOP_PATH_VALUES) -> str:
    """A route's path (``/v1/projects/{project}/…``) with each parameter set from ``values``."""
    return re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], path)


# The web UI's subscription form, filled in: what the UI tests post to create and edit.
SUB_FORM = {
    "name": "s1",
    "topic": "orders",
    "endpoint_url": "http://127.0.0.1:9/hook",
    "endpoint_method": "POST",
    "endpoint_timeout_ms": "5000",
    "retry_max_attempts": "3",
    "retry_backoff": "linear",
    "retry_initial_delay_ms": "200",
    "retry_max_delay_ms": "2000",
    "max_in_flight": "7",
    "rate_limit_per_second": "",
    "delay_ms": "0",
    "dlq_enabled": "on",
}

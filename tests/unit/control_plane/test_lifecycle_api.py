"""The endpoint lifecycle in the admin API: a project's notification endpoint and secret,
the bounds of ``endpoint.disable_after_s`` and ``timeout_ms`` (422 naming the field), and
``POST …/enable`` with the disabled state in the subscription and its status."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from core.model import Disabled
from metastore import paths
from tests.support.control_plane import ControlPlane, embedded_control_plane

SUB = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(tmp_path) as built:
        yield built


async def _shop(client: httpx.AsyncClient, **project: object) -> httpx.Response:
    r = await client.post("/v1/projects", json={"name": "shop", **project})
    assert r.status_code == 201, r.text
    r2 = await client.post("/v1/projects/shop/topics", json={"name": "orders"})
    assert r2.status_code == 201, r2.text
    return r


def _field(r: httpx.Response) -> str:
    assert r.status_code == 422, r.text
    return str(r.json()["details"]["fields"][0]["field"])


async def test_the_notification_secret_is_shown_once(cp: ControlPlane) -> None:
    created = (await _shop(cp.client, notification_url="http://127.0.0.1:9/notices")).json()
    assert created["notification_secret"].startswith("whsec_")
    assert created["notification_url"] == "http://127.0.0.1:9/notices"
    for r in (await cp.client.get("/v1/projects/shop"), await cp.client.get("/v1/projects")):
        assert r.status_code == 200 and 'notification_secret"' not in r.text
        assert created["notification_secret"] not in r.text
    shown = (await cp.client.get("/v1/projects/shop")).json()
    assert shown["notification_secret_set"] is True
    stored = await cp.catalog.get_project("shop")
    assert stored.notification_secret == created["notification_secret"]

    body = {"description": "d", "notification_url": "http://127.0.0.1:9/other", "version": 0}
    body["version"] = shown["version"]
    updated = (await cp.client.put("/v1/projects/shop", json=body)).json()
    assert updated["notification_url"] == "http://127.0.0.1:9/other"
    assert updated["notification_secret"] is None  # not made again, so not shown
    assert (await cp.catalog.get_project("shop")).notification_secret == stored.notification_secret
    # A client that knows only the description keeps the URL; null removes it.
    keep = {"description": "e", "version": updated["version"]}
    kept = (await cp.client.put("/v1/projects/shop", json=keep)).json()
    assert kept["notification_url"] == "http://127.0.0.1:9/other"
    drop = {"description": "e", "notification_url": None, "version": kept["version"]}
    assert (await cp.client.put("/v1/projects/shop", json=drop)).json()["notification_url"] is None


async def test_the_notification_url_obeys_the_endpoint_policy(cp: ControlPlane) -> None:
    metadata = {"name": "p2", "notification_url": "http://169.254.169.254/latest"}
    assert _field(await cp.client.post("/v1/projects", json=metadata)) == "notification_url"
    assert (await cp.client.get("/v1/projects/p2")).status_code == 404
    ftp = {"name": "p3", "notification_url": "ftp://example.com/"}
    assert "notification_url" in _field(await cp.client.post("/v1/projects", json=ftp))


async def test_endpoint_bounds_are_422_naming_the_field(cp: ControlPlane) -> None:
    await _shop(cp.client)
    subs = "/v1/projects/shop/subscriptions"
    for bad in ({"disable_after_s": 0}, {"disable_after_s": 31 * 86_400}):
        body = {**SUB, "endpoint": {**SUB["endpoint"], **bad}}  # type: ignore[dict-item]
        assert _field(await cp.client.post(subs, json=body)) == "endpoint.disable_after_s"
    slow = {**SUB, "endpoint": {**SUB["endpoint"], "timeout_ms": 900_001}}  # type: ignore[dict-item]
    assert _field(await cp.client.post(subs, json=slow)) == "endpoint.timeout_ms"
    ok = {**SUB, "endpoint": {**SUB["endpoint"], "timeout_ms": 900_000, "disable_after_s": 60}}  # type: ignore[dict-item]
    r = await cp.client.post(subs, json=ok)
    assert r.status_code == 201, r.text
    assert r.json()["endpoint"]["disable_after_s"] == 60
    assert r.json()["disabled"] is None


async def test_enable_clears_the_disabled_state_and_the_streak(cp: ControlPlane) -> None:
    await _shop(cp.client)
    base = "/v1/projects/shop/subscriptions/s1"
    assert (await cp.client.post("/v1/projects/shop/subscriptions", json=SUB)).status_code == 201
    since = datetime(2026, 11, 24, 8, 0, 0, tzinfo=UTC)
    sub = await cp.catalog.get_subscription("shop", "s1")
    marker = Disabled(failing_since=since, disabled_at=since, last_error="HTTP 503", by="w1")
    await cp.catalog.update_subscription(sub.model_copy(update={"disabled": marker}))
    await cp.meta.create(paths.endpoint_failing("shop", "s1"), b'{"since_ms": 1}')

    status = (await cp.client.get(f"{base}/status")).json()
    assert status["state"] == "disabled"
    assert status["state_detail"] == "disabled (endpoint failing since 2026-11-24T08:00:00Z)"
    assert (await cp.client.get(base)).json()["disabled"]["last_error"] == "HTTP 503"
    # A settings change keeps it disabled; start ends a pause only.
    view = (await cp.client.get(base)).json()
    put = {k: view[k] for k in ("endpoint", "max_in_flight", "description")}
    r = await cp.client.put(base, json={**put, "description": "x", "version": view["version"]})
    assert r.status_code == 200 and r.json()["disabled"] is not None
    assert (await cp.client.post(f"{base}/start")).json()["disabled"] is not None

    r = await cp.client.post(f"{base}/enable")
    assert r.status_code == 200 and r.json()["disabled"] is None
    assert await cp.meta.get(paths.endpoint_failing("shop", "s1")) is None
    assert (await cp.client.get(f"{base}/status")).json()["state"] != "disabled"
    assert (await cp.client.post(f"{base}/enable")).status_code == 200  # idempotent

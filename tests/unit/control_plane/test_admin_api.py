"""The admin API on the embedded metastore and store: every bad input gets a clear 4xx and
leaves nothing half-created behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from segments.protocol import SegmentStore
from tests.support.control_plane import embedded_control_plane


class Recording:
    """Counts the storage topics that exist, around a real embedded store."""

    def __init__(self, inner: SegmentStore) -> None:
        self.inner = inner
        self.live: set[str] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def create_topic(self, name: str, partitions: int, *, retention_ms: int) -> None:
        await self.inner.create_topic(name, partitions, retention_ms=retention_ms)
        self.live.add(name)

    async def delete_topic(self, name: str) -> None:
        await self.inner.delete_topic(name)
        self.live.discard(name)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, Recording]]:
    async with embedded_control_plane(tmp_path, wrap=Recording) as cp:
        yield cp.client, cp.store  # type: ignore[misc]


SUB = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}


async def _setup(client: httpx.AsyncClient) -> None:
    assert (await client.post("/v1/projects", json={"name": "shop"})).status_code == 201
    r = await client.post("/v1/projects/shop/topics", json={"name": "orders", "partitions": 4})
    assert r.status_code == 201, r.text


async def test_create_read_back_and_timeline(env: tuple[httpx.AsyncClient, Recording]) -> None:
    client, store = env
    await _setup(client)
    topic = (await client.get("/v1/projects/shop/topics/orders")).json()
    assert topic["produce_pointer"]["segment_id"] == 1
    [seg] = topic["segments"]
    assert (seg["partitions"], seg["state"], seg["backend"]) == (4, "active", "embedded")
    assert store.live == {seg["storage_topic"]}
    assert await store.inner.partitions(seg["storage_topic"]) == 4
    timeline = (await client.get("/v1/projects/shop/topics/orders/segments")).json()
    assert [s["id"] for s in timeline["segments"]] == [1]
    r = await client.post("/v1/projects/shop/subscriptions", json=SUB)
    assert r.status_code == 201, r.text
    sub = r.json()
    assert sub["signing_secret"].startswith("whsec_")
    assert sub["consume_pointer"]["segment_id"] == 1
    assert (sub["topic_project"], sub["topic"]) == ("shop", "orders")
    listed = (await client.get("/v1/projects/shop/subscriptions")).json()
    assert [s["name"] for s in listed["items"]] == ["s1"] and listed["total"] == 1


async def test_update_is_compare_and_set(env: tuple[httpx.AsyncClient, Recording]) -> None:
    client, _ = env
    await _setup(client)
    topic = (await client.get("/v1/projects/shop/topics/orders")).json()
    body = {"retention_hours": 24, "version": topic["version"]}
    first = await client.put("/v1/projects/shop/topics/orders", json=body)
    assert first.status_code == 200 and first.json()["retention_hours"] == 24
    stale = await client.put("/v1/projects/shop/topics/orders", json=body)
    assert stale.status_code == 409 and stale.json()["code"] == "version_conflict"


async def _state(client: httpx.AsyncClient) -> tuple[Any, ...]:
    projects = (await client.get("/v1/projects")).json()["items"]
    topics = (await client.get("/v1/projects/shop/topics")).json()["items"]
    subs = (await client.get("/v1/projects/shop/subscriptions")).json()["items"]
    return ([p["name"] for p in projects], [t["name"] for t in topics], [s["name"] for s in subs])


BAD = [
    ("unknown project", "post", "/v1/projects/nope/topics", {"name": "t"}, 404, "not_found"),
    (
        "duplicate topic",
        "post",
        "/v1/projects/shop/topics",
        {"name": "orders"},
        409,
        "already_exists",
    ),
    ("duplicate project", "post", "/v1/projects", {"name": "shop"}, 409, "already_exists"),
    (
        "invalid name",
        "post",
        "/v1/projects/shop/topics",
        {"name": "bad name!"},
        422,
        "validation_failed",
    ),
    (
        "unknown cluster",
        "post",
        "/v1/projects/shop/topics",
        {"name": "t2", "cluster": "mars"},
        422,
        "validation_failed",
    ),
    (
        "zero partitions",
        "post",
        "/v1/projects/shop/topics",
        {"name": "t2", "partitions": 0},
        422,
        "validation_failed",
    ),
    (
        "10000 partitions",
        "post",
        "/v1/projects/shop/topics",
        {"name": "t2", "partitions": 10_000},
        422,
        "validation_failed",
    ),
    (
        "endpoint not http",
        "post",
        "/v1/projects/shop/subscriptions",
        {**SUB, "endpoint": {"url": "ftp://x/y"}},
        422,
        "validation_failed",
    ),
    (
        "unknown topic",
        "post",
        "/v1/projects/shop/subscriptions",
        {**SUB, "topic": "nope"},
        422,
        "validation_failed",
    ),
    (
        "unknown field",
        "post",
        "/v1/projects/shop/topics",
        {"name": "t2", "colour": "red"},
        422,
        "validation_failed",
    ),
]


@pytest.mark.parametrize(
    ("case", "method", "url", "body", "status", "code"), BAD, ids=[b[0] for b in BAD]
)
async def test_bad_input_is_refused_and_creates_nothing(
    env: tuple[httpx.AsyncClient, Recording],
    case: str,
    method: str,
    url: str,
    body: dict[str, Any],
    status: int,
    code: str,
) -> None:
    client, store = env
    await _setup(client)
    before, storage_before = await _state(client), set(store.live)
    r = await client.request(method, url, json=body)
    assert (r.status_code, r.json()["code"]) == (status, code), r.text
    assert r.json()["message"]
    assert await _state(client) == before
    assert store.live == storage_before


async def test_malformed_json_is_400(env: tuple[httpx.AsyncClient, Recording]) -> None:
    client, store = env
    await _setup(client)
    before = await _state(client)
    r = await client.post(
        "/v1/projects/shop/topics",
        content=b'{"name": "t2",',
        headers={"content-type": "application/json"},
    )
    assert (r.status_code, r.json()["code"]) == (400, "malformed")
    assert await _state(client) == before


async def test_validation_errors_name_the_field(env: tuple[httpx.AsyncClient, Recording]) -> None:
    client, _ = env
    await _setup(client)
    r = await client.post("/v1/projects/shop/topics", json={"name": "t2", "partitions": 0})
    assert r.json()["details"]["fields"][0]["field"] == "partitions"
    assert "partitions" in r.json()["message"]


async def test_missing_or_wrong_token_is_401(env: tuple[httpx.AsyncClient, Recording]) -> None:
    client, _ = env
    for headers in ({"Authorization": ""}, {"Authorization": "Bearer wrong"}):
        r = await client.post("/v1/projects", json={"name": "x"}, headers=headers)
        assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
    assert (await client.get("/v1/projects")).json()["items"] == []


async def test_topic_with_subscriptions_is_kept_unless_forced(
    env: tuple[httpx.AsyncClient, Recording],
) -> None:
    client, store = env
    await _setup(client)
    assert (await client.post("/v1/projects/shop/subscriptions", json=SUB)).status_code == 201
    r = await client.delete("/v1/projects/shop/topics/orders")
    assert (r.status_code, r.json()["code"]) == (409, "in_use")
    assert "shop/s1" in r.json()["message"]
    assert len(store.live) == 1
    r = await client.delete("/v1/projects/shop/topics/orders", params={"force": "true"})
    assert r.status_code == 204
    assert store.live == set()
    assert (await client.get("/v1/projects/shop/subscriptions/s1")).status_code == 404
    assert (await client.get("/v1/projects/shop/topics/orders")).status_code == 404


async def test_topic_create_failure_after_storage_drops_the_storage_topic(
    env: tuple[httpx.AsyncClient, Recording],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client, store = env
    await _setup(client)
    from metastore.catalog import Catalog

    async def broken(self: Catalog, *args: Any) -> None:
        raise RuntimeError("metastore died mid-way")

    monkeypatch.setattr(Catalog, "create_topic", broken)
    with pytest.raises(RuntimeError):
        await client.post("/v1/projects/shop/topics", json={"name": "t3"})
    assert len(store.live) == 1  # only the first topic's storage

"""The DLQ admin API on the embedded metastore and store: entries written as a worker writes
them are browsed, unsidelined (into the replay topic) and purged; every bad selector gets a
clear 4xx or an empty result, never a 500. Retry-policy validation names the field."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from metastore.catalog import Catalog
from segments.protocol import SegmentStore, Stored
from segments.subscription import dlq
from segments.subscription.layout import Layout, ensure_layout
from segments.subscription.retry_meta import RetryMeta, internal_record
from tests.support.control_plane import create_shop, embedded_control_plane

BASE = "/v1/projects/shop/subscriptions/s1/dlq/messages"
SUB = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}


class Env:
    def __init__(self, client: httpx.AsyncClient, store: SegmentStore, catalog: Catalog) -> None:
        self.client, self.store, self.catalog = client, store, catalog

    async def dead_letter(self, mid: str, group: str, status: int, failed_ms: int) -> None:
        """Write a DLQ entry the way a worker does."""
        sub = await self.catalog.get_subscription("shop", "s1")
        layout = await ensure_layout(self.catalog.store, {"embedded": self.store}, sub, "embedded")
        msg = Stored(0, 0, failed_ms, mid.encode(), group.encode(), _headers(mid, group))
        meta = RetryMeta(
            origin="1:0:7",
            topic="shop/orders",
            attempts=2,
            first_failed_ms=failed_ms - 1_000,
            last_failed_ms=failed_ms,
            last_status=status,
            last_error=f"HTTP {status}",
        )
        await self.store.produce(layout.dlq, internal_record(msg, meta), partition=0)

    async def layout(self) -> Layout:
        sub = await self.catalog.get_subscription("shop", "s1")
        return await ensure_layout(self.catalog.store, {"embedded": self.store}, sub, "embedded")


def _headers(mid: str, group: str) -> tuple[tuple[str, bytes], ...]:
    return (("x-message-id", mid.encode()), ("x-group-id", group.encode()), ("x-a", b"1"))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with embedded_control_plane(tmp_path) as cp:
        await create_shop(cp.client, partitions=None)
        assert (await cp.client.post("/v1/projects/shop/subscriptions", json=SUB)).is_success
        yield Env(cp.client, cp.store, cp.catalog)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat()


async def test_an_empty_dlq_and_bad_input(env: Env) -> None:
    client = env.client
    empty = await client.get(BASE)
    assert empty.status_code == 200 and empty.json() == {"messages": [], "next_cursor": None}
    none = await client.post(f"{BASE}/unsideline", json={"message_ids": ["x"]})
    assert none.json() == {"unsidelined": 0, "remaining": 0}
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    naive = "2026-01-01T00:00:00"
    cases = [
        (client.get(BASE, params={"failed_before": future}), 422, "failed_before"),
        (client.get(BASE, params={"failed_after": naive}), 422, "time zone"),
        (client.get(BASE, params={"cursor": "!!"}), 400, "cursor"),
        (client.get(BASE, params={"status": 99}), 422, "status"),
        (client.post(f"{BASE}/unsideline", json={}), 422, "exactly one"),
        (client.post(f"{BASE}/unsideline", json={"message_ids": []}), 422, "message_ids"),
        (client.post(f"{BASE}/unsideline", json={"group_ids": ["a"], "limit": 0}), 422, "limit"),
        (client.post(f"{BASE}/unsideline", json={"bogus": 1}), 422, "bogus"),
        (client.post(f"{BASE}/unsideline", json={"failed_before": future}), 422, "future"),
        (client.delete(BASE), 422, "exactly one"),
        (client.delete(BASE, params={"all": "true", "group_id": "g"}), 422, "exactly one"),
        (client.get("/v1/projects/shop/subscriptions/nope/dlq/messages"), 404, "nope"),
    ]
    for call, status, words in cases:
        answer = await call
        assert answer.status_code == status, answer.text
        assert words in answer.text


async def test_browse_page_filter_unsideline_purge(env: Env) -> None:
    now = int(time.time() * 1000)
    for i in range(5):
        await env.dead_letter(f"m{i}", f"g{i % 2}", 500 if i < 3 else 404, now - 10_000 + i)
    client = env.client
    first = (await client.get(BASE, params={"limit": 2})).json()
    assert [m["message_id"] for m in first["messages"]] == ["m4", "m3"]
    second = (await client.get(BASE, params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert [m["message_id"] for m in second["messages"]] == ["m2", "m1"]
    entry = second["messages"][0]
    assert entry["headers"]["x-a"] == "1" and entry["attempts"] == 2
    assert (entry["segment"], entry["partition"], entry["position"]) == (1, 0, 7)
    assert entry["last_error"] == "HTTP 500" and entry["group_id"] == "g0"
    oldest = (await client.get(BASE, params={"order": "oldest", "group": "g1"})).json()
    assert [m["message_id"] for m in oldest["messages"]] == ["m1", "m3"]
    by_status = (await client.get(BASE, params={"status": 404})).json()
    assert [m["message_id"] for m in by_status["messages"]] == ["m4", "m3"]
    after = (await client.get(BASE, params={"failed_after": _iso(now - 10_000 + 2)})).json()
    assert [m["message_id"] for m in after["messages"]] == ["m4", "m3"]
    replayed = await client.post(f"{BASE}/unsideline", json={"group_ids": ["g0"], "limit": 2})
    assert replayed.json() == {"unsidelined": 2, "remaining": 1}
    layout = await env.layout()
    replay = await dlq.read_all(env.store, layout.replay)
    assert [dict(m.headers)["x-message-id"] for m in replay] == [b"m0", b"m2"]
    assert all(RetryMeta.of(m.headers).attempts == 0 for m in replay)
    purged = await client.delete(BASE, params={"message_id": ["m1", "zz"]})
    assert purged.json() == {"purged": 1, "remaining": 0}
    rest = (await client.get(BASE, params={"order": "oldest"})).json()
    assert [m["message_id"] for m in rest["messages"]] == ["m3", "m4"]
    everything = await client.delete(BASE, params={"all": "true"})
    assert everything.json() == {"purged": 2, "remaining": 0}
    assert (await client.get(BASE)).json()["messages"] == []


async def test_retry_policy_validation_names_the_field(env: Env) -> None:
    bad = [
        ({"delay_levels_ms": [5_000, 1_000]}, "delay_levels_ms"),
        ({"delay_levels_ms": [1]}, "delay_levels_ms"),
        ({"retry_statuses": [200]}, "retry_statuses"),
    ]
    for retry, field in bad:
        body = {**SUB, "name": "s2", "retry": retry}
        answer = await env.client.post("/v1/projects/shop/subscriptions", json=body)
        assert answer.status_code == 422, answer.text
        assert field in answer.text


async def test_recover_replays_the_window_only(env: Env) -> None:
    now = int(time.time() * 1000)
    for i in range(6):  # failed at now-6000 … now-1000, one a second
        await env.dead_letter(f"m{i}", "g", 500, now - 6_000 + i * 1_000)
    recover = "/v1/projects/shop/subscriptions/s1/recover"
    window = {"since": _iso(now - 5_000), "until": _iso(now - 2_000)}  # m1, m2, m3
    first = await env.client.post(recover, json={**window, "limit": 2})
    assert first.json() == {"recovered": 2, "remaining": 1}, first.text
    rest = await env.client.post(recover, json=window)
    assert rest.json() == {"recovered": 1, "remaining": 0}
    replay = await dlq.read_all(env.store, (await env.layout()).replay)
    assert [dict(m.headers)["x-message-id"] for m in replay] == [b"m1", b"m2", b"m3"]
    assert {dlq.replay_kind(m) for m in replay} == {dlq.RECOVER}
    assert all(RetryMeta.of(m.headers).attempts == 0 for m in replay)
    left = (await env.client.get(BASE, params={"order": "oldest"})).json()
    assert [m["message_id"] for m in left["messages"]] == ["m0", "m4", "m5"]
    naive = "2026-01-01T00:00:00"
    future = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    cases = [
        ({"since": window["until"], "until": window["since"]}, "must come after"),
        ({"since": naive, "until": window["until"]}, "since"),
        ({"since": future, "until": future}, "future"),
        ({"since": window["since"]}, "until"),
        ({**window, "limit": 0}, "limit"),
        ({**window, "bogus": 1}, "bogus"),
    ]
    for body, words in cases:
        answer = await env.client.post(recover, json=body)
        assert answer.status_code == 422, answer.text
        assert words in answer.text and answer.json()["code"]

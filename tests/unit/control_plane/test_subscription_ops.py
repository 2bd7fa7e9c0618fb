"""Stop / start, seek and status through the admin API, on the embedded backends, with a real
Worker (the control plane's own Assigner gives it the subscription) and a local endpoint."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.model import SegmentState
from metastore import paths
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.protocol import Record, SegmentStore
from tests.support.control_plane import embedded_control_plane
from tests.support.hook import Hook, serve_hook
from tests.support.load import Producing
from tests.support.until import until
from tests.support.until import until as _until
from tests.support.workers import worker_in_process

SUB = "/v1/projects/shop/subscriptions/s1"


@dataclass
class Env:
    client: httpx.AsyncClient
    store: SegmentStore
    meta: EmbeddedMetaStore
    storage: str
    hook: Hook

    def ids(self) -> Counter[str]:
        return Counter(self.hook.delivered())

    async def produce(self, names: list[str], timestamp_ms: int | None = None) -> None:
        for i, mid in enumerate(names):
            headers = (("x-message-id", mid.encode()),)
            ts = None if timestamp_ms is None else timestamp_ms + i
            await self.store.produce(self.storage, Record(mid.encode(), None, headers, ts))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with (
        serve_hook() as hook,
        embedded_control_plane(tmp_path, assign_interval_s=0.2) as cp,
    ):
        client, meta, store = cp.client, cp.meta, cp.store
        await client.post("/v1/projects", json={"name": "shop"})
        topic = {"name": "orders", "partitions": 2}
        r = await client.post("/v1/projects/shop/topics", json=topic)
        storage = r.json()["segments"][0]["storage_topic"]
        sub = {"name": "s1", "topic": "orders", "endpoint": {"url": hook.url}}
        assert (await client.post(SUB.rsplit("/", 1)[0], json=sub)).status_code == 201
        options = {"commit_every_s": 0.1, "lock_retry_s": 0.1, "status_interval_s": 0.2}
        async with worker_in_process(meta, {"embedded": store}, "w1", **options):
            yield Env(client, store, meta, storage, hook)


async def _status(env: Env) -> dict[str, Any]:
    r = await env.client.get(f"{SUB}/status")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def _status_until(env: Env, condition: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    async def met() -> dict[str, Any] | None:
        status = await _status(env)
        return status if condition(status) else None

    return await until(met, 20, "the status", interval=0.1)


async def test_status_shows_figures_lag_and_history(env: Env) -> None:
    names = [f"m{i}" for i in range(30)]
    await env.produce(names)
    await _until(lambda: set(env.ids()) == set(names))
    status = await _status_until(env, lambda s: s["totals"]["delivered"] == 30 and s["lag"] == 0)
    assert status["state"] == "running" and status["worker"] == "w1"
    assert status["segment"] == 1 and status["subscription"] == "shop/s1"
    assert [p["partition"] for p in status["partitions"]] == [0, 1]
    assert sum(p["end"] for p in status["partitions"]) == 30
    assert all(p["committed"] == p["end"] and p["lag"] == 0 for p in status["partitions"])
    assert len(status["history"]) == 360
    assert sum(b["delivered"] for b in status["history"]) == 30
    assert status["updated_at"] is not None and status["in_flight"] == 0
    await env.client.post(f"{SUB}/stop")
    await env.produce(["late-1", "late-2"])
    status = await _status_until(env, lambda s: s["lag"] == 2)
    assert status["state"] == "paused"


async def test_stop_stops_within_a_second_and_start_skips_nothing(env: Env) -> None:
    async def one(i: int) -> str:
        await env.produce([f"m{i}"])
        return f"m{i}"

    load = Producing(one)
    await _until(lambda: len(env.hook.got) >= 20)
    r = await env.client.post(f"{SUB}/stop")
    assert r.status_code == 200 and r.json()["paused"] is True
    stopped_at = time.time()
    await asyncio.sleep(2.0)  # proves that nothing more is delivered once stopped
    assert max(d.at for d in env.hook.got) - stopped_at < 1.0
    produced = await load.stop()
    assert set(env.ids()) < set(produced)
    assert (await env.client.post(f"{SUB}/stop")).json()["paused"] is True  # idempotent
    r = await env.client.post(f"{SUB}/start")
    assert r.status_code == 200 and r.json()["paused"] is False
    await _until(lambda: set(env.ids()) == set(produced))


async def test_seek_to_a_timestamp_earliest_and_latest(env: Env) -> None:
    base = int(time.time() * 1000) - 600_000
    old = [f"old{i}" for i in range(20)]
    await env.produce(old, timestamp_ms=base)  # old_i at base + i
    await _until(lambda: set(env.ids()) == set(old))
    await _status_until(env, lambda s: s["lag"] == 0)
    at = datetime.fromtimestamp((base + 10) / 1000, UTC).isoformat()
    r = await env.client.post(f"{SUB}/seek", json={"timestamp": at})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["segment"] == 1 and set(body["positions"]) == {"0", "1"}
    await _until(lambda: all(env.ids()[m] == 2 for m in old[10:]))
    await asyncio.sleep(0.5)  # proves that nothing before the timestamp comes again
    assert all(env.ids()[m] == 1 for m in old[:10])  # before the timestamp: not again

    r = await env.client.post(f"{SUB}/seek", json={"to": "earliest"})
    assert r.status_code == 200, r.text
    await _until(lambda: all(env.ids()[m] >= 2 for m in old))
    await _status_until(env, lambda s: s["lag"] == 0)
    await env.client.post(f"{SUB}/stop")
    await env.produce(["skipped"])
    r = await env.client.post(f"{SUB}/seek", json={"to": "latest"})
    assert r.status_code == 200, r.text
    assert sum(r.json()["positions"].values()) == 21
    assert (await env.meta.get(paths.seek_request("shop", "s1"))) is None
    await env.client.post(f"{SUB}/start")
    await env.produce(["after"])
    await _until(lambda: "after" in env.ids())
    assert "skipped" not in env.ids()


@pytest.mark.parametrize(
    "body",
    [{}, {"to": "middle"}, {"to": "earliest", "timestamp": "2026-01-01T00:00:00Z"}],
)
async def test_a_bad_seek_is_422_and_an_unknown_subscription_404(
    env: Env, body: dict[str, str]
) -> None:
    r = await env.client.post(f"{SUB}/seek", json=body)
    assert r.status_code == 422, r.text
    assert r.json()["code"] == "validation_failed"
    r = await env.client.post(f"{SUB}/seek", json={"timestamp": "2026-01-01T00:00:00"})
    assert r.status_code == 422  # no offset: ambiguous
    missing = "/v1/projects/shop/subscriptions/nope"
    for method, suffix in (("POST", "stop"), ("POST", "start"), ("GET", "status")):
        assert (await env.client.request(method, f"{missing}/{suffix}")).status_code == 404
    r = await env.client.post(f"{missing}/seek", json={"to": "latest"})
    assert r.status_code == 404


async def test_seek_back_into_a_sealed_segment_reads_the_later_one_again(env: Env) -> None:
    catalog = Catalog(env.meta)
    base = int(time.time() * 1000) - 600_000
    old = [f"old{i}" for i in range(20)]
    await env.produce(old, timestamp_ms=base)
    await _until(lambda: set(env.ids()) == set(old))
    # A cutover by hand: seal segment 1, make segment 2 active.
    topic = await catalog.get_topic("shop", "orders")
    first = topic.segments[0]
    second_name = f"{env.storage}.next"
    await env.store.create_topic(second_name, 2, retention_ms=3_600_000)
    pending = first.model_copy(
        update={"id": 2, "storage_topic": second_name, "state": SegmentState.PENDING}
    )
    await catalog.add_segment("shop", "orders", pending)
    ends = await env.store.seal(env.storage)
    sealed = first.model_copy(
        update={"state": SegmentState.SEALED, "end_positions": ends, "sealed_at": datetime.now(UTC)}
    )
    active = pending.model_copy(update={"state": SegmentState.ACTIVE})
    await catalog.commit_segment_switch(topic, sealed, active)
    env.storage = second_name
    new = [f"new{i}" for i in range(10)]
    await env.produce(new)
    await _until(lambda: set(new) <= set(env.ids()))
    await _status_until(env, lambda s: s["segment"] == 2 and s["lag"] == 0)

    at = datetime.fromtimestamp((base + 10) / 1000, UTC).isoformat()
    r = await env.client.post(f"{SUB}/seek", json={"timestamp": at})
    assert r.status_code == 200, r.text
    assert r.json()["segment"] == 1
    await _until(lambda: all(env.ids()[m] == 2 for m in old[10:] + new))
    await _status_until(env, lambda s: s["segment"] == 2 and s["lag"] == 0)
    assert all(env.ids()[m] == 1 for m in old[:10])
    r = await env.client.post(f"{SUB}/seek", json={"to": "latest"})
    assert r.json()["segment"] == 2


async def test_a_sharded_subscription_sums_its_shards_and_seeks_them_all(env: Env) -> None:
    base = SUB.rsplit("/", 1)[0]
    hook = (await env.client.get(SUB)).json()["endpoint"]
    body = {"name": "big", "topic": "orders", "endpoint": hook, "shards": 2}
    r = await env.client.post(base, json=body)
    assert r.status_code == 201 and r.json()["shards"] == 2
    await env.client.post(f"{SUB}/stop")  # only "big" delivers from now on
    names = [f"b{i}" for i in range(40)]
    await env.produce(names)
    await _until(lambda: set(env.ids()) >= set(names))
    url = f"{base}/big/status"

    async def status() -> dict[str, Any]:
        return (await env.client.get(url)).json()  # type: ignore[no-any-return]

    async def settled() -> dict[str, Any] | None:
        s = await status()
        return s if s["totals"]["delivered"] == 40 and s["lag"] == 0 else None

    s = await until(settled, 20, "40 delivered, lag 0", interval=0.1)
    assert [row["shard"] for row in s["shards"]] == [0, 1]
    assert all(row["worker"] == "w1" and row["state"] == "running" for row in s["shards"])
    assert [p["partition"] for p in s["partitions"]] == [0, 1]  # 2 | 2: one reader each
    assert sum(p["end"] for p in s["partitions"]) == 40
    r = await env.client.post(f"{base}/big/seek", json={"to": "earliest"})
    assert r.status_code == 200, r.text
    await _until(lambda: all(env.ids()[n] == 2 for n in names))  # both shards went back
    current = (await env.client.get(f"{base}/big")).json()
    update = {k: current[k] for k in ("endpoint", "max_in_flight")} | {
        "version": current["version"],
        "shards": 3,
    }
    r = await env.client.put(f"{base}/big", json=update)
    assert r.status_code == 422 and "shards" in r.text

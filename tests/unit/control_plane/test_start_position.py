"""Where a new subscription starts (``start`` at create, docs/receiving.md), on the embedded
backends, through the admin API, with a real Worker that the control plane's Assigner feeds."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.model import Backend, Segment, SegmentState
from metastore.catalog import Catalog
from segments.protocol import Record, SegmentStore
from tests.support.control_plane import embedded_control_plane, json_of
from tests.support.hook import Hook, serve_hook
from tests.support.until import until
from tests.support.workers import worker_in_process

SUBS = "/v1/projects/shop/subscriptions"


@dataclass
class Env:
    client: httpx.AsyncClient
    store: SegmentStore
    catalog: Catalog
    storage: str
    hook: Hook

    async def produce(self, ids: list[str], at_ms: int | None = None, storage: str = "") -> None:
        for i, mid in enumerate(ids):
            headers = (("x-message-id", mid.encode()),)
            ts = None if at_ms is None else at_ms + i
            await self.store.produce(
                storage or self.storage, Record(mid.encode(), None, headers, ts)
            )

    async def subscribe(self, name: str, **fields: Any) -> dict[str, Any]:
        body = {"name": name, "topic": "orders", "endpoint": {"url": self.hook.url_for(name)}}
        return json_of(await self.client.post(SUBS, json=body | fields), 201)


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with (
        serve_hook() as hook,
        embedded_control_plane(tmp_path, assign_interval_s=0.2) as cp,
    ):
        await cp.client.post("/v1/projects", json={"name": "shop"})
        r = await cp.client.post(
            "/v1/projects/shop/topics", json={"name": "orders", "partitions": 2}
        )
        storage = r.json()["segments"][0]["storage_topic"]
        options = {"commit_every_s": 0.1, "lock_retry_s": 0.1, "status_interval_s": 0.2}
        async with worker_in_process(cp.meta, {"embedded": cp.store}, "w1", **options):
            yield Env(cp.client, cp.store, cp.catalog, storage, hook)


def _ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


async def test_latest_by_default_earliest_all_and_a_time_from_there(env: Env) -> None:
    base = _ms(datetime.now(UTC)) - 600_000
    old = [f"old{i}" for i in range(100)]
    await env.produce(old, at_ms=base)  # old_i stored at base + i
    at = datetime.fromtimestamp((base + 60) / 1000, UTC).isoformat()
    latest = await env.subscribe("latest")
    await env.subscribe("earliest", start="earliest")
    await env.subscribe("time", start=at)
    assert latest["start"]["requested"] == "latest" and latest["start"]["segment"] == 1
    await env.produce(["late"])
    await until(lambda: env.hook.ids("latest") == ["late"], what="the late message")
    await until(lambda: sorted(env.hook.ids("earliest")) == sorted([*old, "late"]))
    await until(lambda: sorted(env.hook.ids("time")) == sorted([*old[60:], "late"]))
    await asyncio.sleep(0.5)  # proves that no older message follows
    assert env.hook.ids("latest") == ["late"]
    status = (await env.client.get(f"{SUBS}/latest/status")).json()
    assert status["lag"] == 0 and sum(p["committed"] for p in status["partitions"]) == 101


async def test_the_start_is_used_once_a_seek_back_delivers_the_backlog(env: Env) -> None:
    await env.produce([f"old{i}" for i in range(10)])
    await env.subscribe("s")
    await env.produce(["late"])
    await until(lambda: env.hook.ids("s") == ["late"])
    r = await env.client.post(f"{SUBS}/s/seek", json={"to": "earliest"})
    assert r.status_code == 200, r.text
    await until(lambda: len(env.hook.ids("s")) == 12, what="the backlog after the seek")


async def test_latest_skips_the_older_segments_and_earliest_reads_them(env: Env) -> None:
    await env.produce(["s1-a", "s1-b"])
    second = await _cut_over(env)
    await env.produce(["s2-a"], storage=second)
    await env.subscribe("latest")
    await env.subscribe("earliest", start="earliest")
    await env.produce(["late"], storage=second)
    await until(lambda: env.hook.ids("latest") == ["late"])
    wanted = ["late", "s1-a", "s1-b", "s2-a"]
    await until(lambda: sorted(env.hook.ids("earliest")) == wanted)
    await asyncio.sleep(0.5)  # proves that no older message follows
    assert env.hook.ids("latest") == ["late"]


async def test_a_time_in_the_future_or_no_time_is_refused_naming_the_field(env: Env) -> None:
    ahead = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    for start in (ahead, "soon", "2026-01-01T00:00:00"):  # ahead, no time, no offset
        body = {"name": "s", "topic": "orders", "endpoint": {"url": env.hook.url}, "start": start}
        r = await env.client.post(SUBS, json=body)
        assert r.status_code == 422, r.text
        assert "start" in r.text


async def _cut_over(env: Env) -> str:
    """Segment 1 sealed, segment 2 active (a cutover's outcome): segment 2's storage topic."""
    second = f"{env.storage}.2"
    await env.store.create_topic(second, 2, retention_ms=3_600_000)
    seg = Segment(
        id=2,
        cluster="embedded",
        backend=Backend.EMBEDDED,
        storage_topic=second,
        partitions=2,
        state=SegmentState.PENDING,
    )
    await env.catalog.add_segment("shop", "orders", seg)
    topic = await env.catalog.get_topic("shop", "orders")
    first = topic.segments[0]
    ends = await env.store.seal(first.storage_topic)
    sealed = first.model_copy(
        update={
            "state": SegmentState.SEALED,
            "end_positions": ends,
            "sealed_at": datetime.fromtimestamp(time.time(), UTC),
        }
    )
    active = seg.model_copy(update={"state": SegmentState.ACTIVE})
    await env.catalog.commit_segment_switch(topic, sealed, active)
    return second

"""The cutover end to end on the embedded metastore and store, in one process: a control
plane (the coordinator) and two producer services under a grouped load. Every 2xx'd message
is in the old segment below its sealed end or in the new one, per group in order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.app import create_app as create_cp
from control_plane.settings import ControlPlaneSettings
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from producer_api.app import create_app as create_producer
from producer_api.settings import ProducerSettings
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import SegmentStore
from tests.support.control_plane import TOKEN, asgi_client, create_shop
from tests.support.until import until

CUTOVER = "/v1/projects/shop/topics/orders/cutover"


@dataclass
class Env:
    cp: httpx.AsyncClient
    producers: list[httpx.AsyncClient]
    catalog: Catalog
    store: SegmentStore


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))
    clusters = {"embedded": cluster}
    cp_settings = ControlPlaneSettings(
        admin_token=TOKEN, clusters=clusters, cutover_switch_timeout_s=3.0, member_id="cp-1"
    )
    async with contextlib.AsyncExitStack() as stack:
        meta = await stack.enter_async_context(EmbeddedMetaStore(str(tmp_path / "meta.db")))
        store = await stack.enter_async_context(create_store(cluster))
        cp_app = create_cp(cp_settings, metastore=meta, stores={"embedded": store})
        cp = await asgi_client(stack, cp_app, "http://cp")
        producers = []
        for i in range(2):
            settings = ProducerSettings(admin_token=TOKEN, clusters=clusters, member_id=f"prod-{i}")
            app = create_producer(settings, metastore=meta, stores={"embedded": store})
            producers.append(await asgi_client(stack, app, "http://p"))
        await create_shop(cp, partitions=2, grouped=True)
        yield Env(cp, producers, Catalog(meta), store)


async def _load(env: Env, stop: asyncio.Event, acked: dict[str, list[int]]) -> None:
    """10 groups, each sending its next sequence number once the previous one was answered."""

    async def group(g: str) -> None:
        seq = 0
        while not stop.is_set():
            client = env.producers[seq % len(env.producers)]
            r = await client.post(
                "/v1/projects/shop/topics/orders/produce",
                content=f"{g}:{seq}".encode(),
                headers={"X-Group-Id": g},
            )
            if r.status_code == 201:
                acked[g].append(seq)
                seq += 1
            else:
                await asyncio.sleep(0.05)

    await asyncio.gather(*(group(g) for g in acked))


async def _wait_phase(
    cp: httpx.AsyncClient, phases: set[str], timeout: float = 30
) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        doc = (await cp.get(CUTOVER)).json()
        if doc.get("phase") in phases:
            return doc
        assert asyncio.get_running_loop().time() < deadline, doc
        await asyncio.sleep(0.05)


async def _stored(env: Env) -> dict[str, list[int]]:
    """Every message of every non-pending segment, oldest segment first, per group."""
    topic = await env.catalog.get_topic("shop", "orders")
    out: dict[str, list[int]] = {}
    for seg in topic.segments:
        if seg.state.value == "pending":
            continue
        for p in range(seg.partitions):
            end = (seg.end_positions or {}).get(p)
            pos = 0
            while True:
                batch = await env.store.read(
                    seg.storage_topic, p, pos, max_records=500, timeout=0.1
                )
                if not batch:
                    break
                for msg in batch:
                    if end is not None and msg.position >= end:
                        raise AssertionError(f"message past the sealed end in segment {seg.id}")
                    g, seq = msg.value.decode().split(":")
                    out.setdefault(g, []).append(int(seq))
                pos = batch[-1].position + 1
    return out


async def test_cutover_under_load_keeps_every_message_in_order(env: Env) -> None:
    acked: dict[str, list[int]] = {f"g{i}": [] for i in range(10)}
    stop = asyncio.Event()
    load = asyncio.create_task(_load(env, stop, acked))
    await until(lambda: sum(map(len, acked.values())) >= 10, 10, "the load under way")
    assert (await env.cp.get(CUTOVER)).status_code == 404
    r = await env.cp.post(CUTOVER, json={"cluster": "embedded", "partitions": 3})
    assert r.status_code == 202, r.text
    assert r.json()["phase"] == "PREPARE" and r.json()["to_segment"] == 2
    again = await env.cp.post(CUTOVER, json={"cluster": "embedded", "partitions": 3})
    assert again.status_code == 409 and again.json()["code"] == "cutover_in_progress"
    doc = await _wait_phase(env.cp, {"COMPLETE", "ROLLED_BACK", "ABORTED"})
    await asyncio.sleep(0.5)  # not a wait: the load goes on a while on the new segment
    stop.set()
    await load
    assert doc["phase"] == "COMPLETE", doc
    assert set(doc["producers"]) == {"prod-0", "prod-1"}
    assert all(a["switched_at"] and a["committed_at"] for a in doc["producers"].values())
    assert (await env.cp.delete(CUTOVER)).status_code == 409
    await _wait_active_cleared(env)
    back = await env.cp.post(CUTOVER, json={"cluster": "embedded", "partitions": 2})
    assert back.status_code == 202 and back.json()["to_segment"] == 3  # a rollback is new
    await _wait_phase(env.cp, {"COMPLETE"})
    topic = await env.catalog.get_topic("shop", "orders")
    assert topic.produce_pointer is not None and topic.produce_pointer.segment_id == 3
    old = topic.segment(1)
    assert old is not None and old.state.value == "sealed" and old.end_positions is not None
    stored = await _stored(env)
    for g, seqs in acked.items():
        assert seqs, f"group {g} got nothing through"
        assert stored[g] == list(range(len(stored[g]))), f"group {g} out of order"
        assert set(seqs) <= set(stored[g])


async def test_bad_requests_and_abort(env: Env) -> None:
    bad = await env.cp.post(CUTOVER, json={"cluster": "nope", "partitions": 3})
    assert bad.status_code == 422 and "cluster" in bad.json()["message"]
    bad = await env.cp.post(CUTOVER, json={"cluster": "embedded", "partitions": 0})
    assert bad.status_code == 422
    missing = await env.cp.post(
        "/v1/projects/shop/topics/none/cutover", json={"cluster": "embedded", "partitions": 1}
    )
    assert missing.status_code == 404
    assert (await env.cp.delete(CUTOVER)).status_code == 404
    r = await env.cp.post(CUTOVER, json={"cluster": "embedded", "partitions": 3})
    assert r.status_code == 202
    aborted = await env.cp.delete(CUTOVER)
    assert aborted.status_code == 200, aborted.text
    if aborted.json()["phase"] == "ABORTED":
        topic = await env.catalog.get_topic("shop", "orders")
        assert topic.produce_pointer is not None and topic.produce_pointer.segment_id == 1
        r = await env.producers[0].post(
            "/v1/projects/shop/topics/orders/produce", content=b"x", headers={"X-Group-Id": "g"}
        )
        assert r.status_code == 201 and r.json()["segment"] == 1
        # a later cutover never reuses the id of the aborted one
        await _wait_active_cleared(env)
        r = await env.cp.post(CUTOVER, json={"cluster": "embedded", "partitions": 1})
        assert r.status_code == 202 and r.json()["to_segment"] == 3


async def _wait_active_cleared(env: Env) -> None:
    async def cleared() -> bool:
        return not await env.catalog.store.children("/cutovers/active")

    await until(cleared, 5, "the coordinator finishing the aborted cutover", interval=0.05)

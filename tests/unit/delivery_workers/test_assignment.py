"""Assignment of subscriptions to workers on the embedded backends: one metastore file, an
Assigner and two Workers each on its own store (its own session), a real local endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from control_plane.assigner import Assigner, rendezvous
from core.model import (
    Backend,
    Endpoint,
    Project,
    Segment,
    SegmentState,
    Subscription,
    Topic,
)
from delivery_workers.fast_sender import FastSender
from delivery_workers.worker import Worker
from metastore import paths
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import Record, SegmentStore
from segments.subscription.layout import load_layout

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SUBS = [f"s{i}" for i in range(6)]


@dataclass
class Hook:
    url: str = ""
    got: dict[str, list[tuple[float, str]]] = field(default_factory=dict)  # sub → (at, id)

    def ids(self, sub: str) -> set[str]:
        return {mid for _, mid in self.got.get(sub, [])}


@dataclass
class World:
    file: str
    catalog: Catalog
    store: SegmentStore
    hook: Hook
    stack: list[tuple[Worker, EmbeddedMetaStore, FastSender]] = field(default_factory=list)

    async def worker(self, member: str) -> Worker:
        meta = EmbeddedMetaStore(self.file)
        await meta.start()
        sender = FastSender()
        await sender.start()
        worker = Worker(
            meta, {"embedded": self.store}, sender, member, commit_every_s=0.1, lock_retry_s=0.1
        )
        await worker.start()
        self.stack.append((worker, meta, sender))
        return worker

    async def stop(self, worker: Worker) -> None:
        for entry in self.stack:
            if entry[0] is worker:
                self.stack.remove(entry)
                await worker.aclose()
                await entry[1].aclose()
                await entry[2].aclose()
                return

    async def subscribe(self, name: str) -> None:
        await self.catalog.create_subscription(
            Subscription(
                project="p",
                name=name,
                topic_project="p",
                topic="t",
                endpoint=Endpoint(url=f"{self.hook.url}/{name}"),
                signing_secret=SECRET,
            )
        )

    async def produce(self, prefix: str, count: int) -> list[str]:
        ids = [f"{prefix}-{i}" for i in range(count)]
        for mid in ids:
            headers = (("x-message-id", mid.encode()),)
            await self.store.produce("st.1", Record(mid.encode(), key=None, headers=headers))
        return ids


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    hook = Hook()

    async def receive(request: web.Request) -> web.Response:
        sub = request.match_info["sub"]
        hook.got.setdefault(sub, []).append((time.monotonic(), request.headers["X-Message-Id"]))
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook/{sub}", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hook.url = f"http://127.0.0.1:{port}/hook"
    file = str(tmp_path / "meta.db")
    try:
        async with (
            EmbeddedMetaStore(file) as meta,
            create_store(EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))) as store,
        ):
            catalog = Catalog(meta)
            await catalog.create_project(Project(name="p"))
            await store.create_topic("st.1", 3, retention_ms=3_600_000)
            segment = Segment(
                id=1,
                cluster="embedded",
                backend=Backend.EMBEDDED,
                storage_topic="st.1",
                partitions=3,
                state=SegmentState.ACTIVE,
            )
            await catalog.create_topic(Topic(project="p", name="t"), segment)
            world = World(file, catalog, store, hook)
            async with Assigner(meta, catalog, "cp-1", interval_s=0.5):
                try:
                    yield world
                finally:
                    for worker, *_ in list(world.stack):
                        await world.stop(worker)
    finally:
        await runner.cleanup()


async def _until(condition: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


def test_rendezvous_moves_only_what_the_leaver_held() -> None:
    keys = [f"p/s{i}" for i in range(200)]
    three = rendezvous(keys, ["a", "b", "c"])
    two = rendezvous(keys, ["a", "b"])
    assert sorted(k for ks in three.values() for k in ks) == sorted(keys)
    assert set(three["a"]) <= set(two["a"]) and set(three["b"]) <= set(two["b"])
    assert all(len(ks) > 40 for ks in three.values())  # spread, not piled on one worker
    assert rendezvous(keys, []) == {}


async def test_spread_failover_and_never_two_owners(world: World) -> None:
    for name in SUBS:
        await world.subscribe(name)
    w1, w2 = await world.worker("w1"), await world.worker("w2")
    everything = {f"p/{s}" for s in SUBS}
    await _until(lambda: set(w1.runners) | set(w2.runners) == everything)
    assert w1.runners and w2.runners and not set(w1.runners) & set(w2.runners)
    locks = await world.catalog.store.children(paths.SUBSCRIPTION_LOCKS)
    assert sorted(locks) == sorted(f"p:{s}" for s in SUBS)
    for key in everything:
        node = await world.catalog.store.get(paths.subscription_lock(*key.split("/")))
        assert node is not None
        assert json.loads(node.data)["member"] == ("w1" if key in w1.runners else "w2")

    overlaps: list[set[str]] = []

    async def watch_overlap() -> None:
        while True:
            if both := set(w1.runners) & set(w2.runners):
                overlaps.append(both)
            await asyncio.sleep(0.01)

    checker = asyncio.create_task(watch_overlap())
    first = await world.produce("a", 40)
    await _until(lambda: all(world.hook.ids(s) >= set(first) for s in SUBS))
    moved = set(w1.runners)
    started = time.monotonic()
    await world.stop(w1)
    await _until(lambda: set(w2.runners) == everything, timeout=10)
    takeover = time.monotonic() - started
    print(f"takeover of {len(moved)} subscriptions in {takeover:.2f}s")
    second = await world.produce("b", 40)
    await _until(lambda: all(world.hook.ids(s) >= set(first + second) for s in SUBS))
    checker.cancel()
    assert takeover < 5
    assert overlaps == []
    holders = {
        json.loads(node.data)["member"]
        for s in SUBS
        if (node := await world.catalog.store.get(paths.subscription_lock("p", s)))
    }
    assert holders == {"w2"}


async def test_pause_stops_deliveries_and_resume_skips_nothing(world: World) -> None:
    await world.subscribe("s0")
    worker = await world.worker("w1")
    await _until(lambda: "p/s0" in worker.runners)
    produced: list[str] = []
    stop = asyncio.Event()

    async def keep_producing() -> None:
        # Stopped by the event, never cancelled: a cancel could land after the store took a
        # message and before it is listed here, and the test would count one too few.
        for i in range(10_000):
            if stop.is_set():
                return
            produced.extend(await world.produce(f"m{i}", 1))
            await asyncio.sleep(0.01)

    producing = asyncio.create_task(keep_producing())
    await _until(lambda: len(world.hook.ids("s0")) >= 20)
    sub = await world.catalog.get_subscription("p", "s0")
    await world.catalog.update_subscription(sub.model_copy(update={"paused": True}))
    paused_at = time.monotonic()
    await asyncio.sleep(2.0)
    last = max(at for at, _ in world.hook.got["s0"])
    assert last - paused_at < 1.0, f"delivered {last - paused_at:.2f}s after the pause"
    assert "p/s0" not in worker.runners
    stop.set()
    await producing
    sub = await world.catalog.get_subscription("p", "s0")
    await world.catalog.update_subscription(sub.model_copy(update={"paused": False}))
    await _until(lambda: world.hook.ids("s0") >= set(produced))
    assert len(world.hook.ids("s0")) == len(produced)


async def test_deleting_a_subscription_deletes_its_internal_topics(world: World) -> None:
    await world.subscribe("s0")
    worker = await world.worker("w1")
    await _until(lambda: "p/s0" in worker.runners)
    due = str(int(time.time() * 1000) + 60_000).encode()
    headers = (("x-message-id", b"later"), ("x-deliver-at", due))
    await world.store.produce("st.1", Record(b"x", key=None, headers=headers))
    sub = await world.catalog.get_subscription("p", "s0")
    async with asyncio.timeout(10):
        while (layout := await load_layout(world.catalog.store, sub)) is None:
            await asyncio.sleep(0.05)
    assert await world.store.partitions(layout.level(30_000)) == 1
    await world.catalog.delete_subscription("p", "s0")
    async with asyncio.timeout(10):
        while await world.catalog.store.get(paths.internal_topics("p", "s0")) is not None:
            await asyncio.sleep(0.05)
    for name in layout.topics():
        assert await world.store.partitions(name) is None, name


async def test_a_lock_created_after_its_owner_was_unassigned_is_released(world: World) -> None:
    """Unassigned while the lock's create is on the wire: the create lands anyway, and the
    worker deletes it, or the next owner would wait for it as long as this worker lives."""
    worker = await world.worker("w1")
    meta = worker.metastore
    real_create = meta.create

    async def slow_create(path: str, data: bytes, **kw: Any) -> Any:
        landed = asyncio.ensure_future(real_create(path, data, **kw))
        await asyncio.sleep(0.3)
        return await landed

    lock = paths.subscription_lock("p", "orphan")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(meta, "create", slow_create)
        acquiring = asyncio.create_task(worker._acquire(lock))
        await asyncio.sleep(0.1)
        acquiring.cancel()
        with pytest.raises(asyncio.CancelledError):
            await acquiring
        assert await meta.get(lock) is not None  # the create landed after the cancel
        async with asyncio.timeout(5):
            while await meta.get(lock) is not None:
                await asyncio.sleep(0.05)

"""Two worker processes on real ZooKeeper and Kafka, an Assigner in the test process: one
worker is SIGKILLed mid-load and its subscriptions resume on the other from the committed
positions, once ZooKeeper expires the dead worker's session (short here: 4 s)."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from control_plane.assigner import Assigner
from core.model import (
    Backend,
    Endpoint,
    Project,
    Segment,
    SegmentState,
    Subscription,
    Topic,
)
from metastore import paths
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import KafkaClusterConfig
from segments.protocol import Record
from segments.registry import open_store
from tests.support.processes import WorkerProcess
from tests.support.services import RealServices

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
SUBS = ["s0", "s1", "s2", "s3"]
TOTAL = 2_000
SESSION_S = 4.0


async def _diagnosis(workers: list[WorkerProcess], meta: Any, got: dict[str, list[str]]) -> str:
    """What a stalled run looked like: locks, deliveries, each worker's metrics and log."""
    lines = [
        f"holders: {await _holders(meta)}",
        f"delivered: { {s: len(v) for s, v in got.items()} }",
    ]
    async with httpx.AsyncClient() as client:
        for w in workers:
            try:
                text = (await client.get(f"http://127.0.0.1:{w.port}/metrics", timeout=2)).text
            except httpx.HTTPError as exc:
                text = f"(no metrics: {exc})"
            metrics = [m for m in text.splitlines() if m.startswith("httpbus_")]
            lines += [
                f"--- {w.member} metrics",
                *metrics[:40],
                f"--- {w.member} log",
                w.log.read_text()[-3000:],
            ]
    return "\n".join(lines)


async def _endpoint(got: dict[str, list[str]]) -> tuple[web.AppRunner, str]:
    async def receive(request: web.Request) -> web.Response:
        got.setdefault(request.match_info["sub"], []).append(request.headers["X-Message-Id"])
        await asyncio.sleep(0.002)  # a real endpoint takes a moment: the load lasts a while
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook/{sub}", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}/hook"


async def _holders(meta: Any) -> dict[str, str]:
    out = {}
    for s in SUBS:
        node = await meta.get(paths.subscription_lock("shop", s))
        if node is not None:
            out[s] = json.loads(node.data)["member"]
    return out


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, dict[str, list[str]]]]:
    got: dict[str, list[str]] = {}
    runner, url = await _endpoint(got)
    try:
        yield url, got
    finally:
        await runner.cleanup()


async def test_sigkilled_worker_hands_over_and_nothing_is_lost(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    endpoint: tuple[str, dict[str, list[str]]],
) -> None:
    url, got = endpoint
    zk = ZooKeeperConfig(
        hosts=real_services.zookeeper, root=f"/worker-{unique}", session_timeout_s=SESSION_S
    )
    kafka = KafkaClusterConfig(bootstrap_servers=real_services.kafka)
    settings = {
        "metastore": zk.model_dump(),
        "clusters": {"kafka-main": kafka.model_dump()},
        "commit_every_s": 0.2,
        "lock_retry_s": 0.2,
    }
    storage = f"it.{unique}.orders.s1"
    async with open_metastore(zk) as meta, open_store(kafka) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await store.create_topic(storage, 4, retention_ms=3_600_000)
        segment = Segment(
            id=1,
            cluster="kafka-main",
            backend=Backend.KAFKA,
            storage_topic=storage,
            partitions=4,
            state=SegmentState.ACTIVE,
        )
        await catalog.create_topic(Topic(project="shop", name="orders"), segment)
        for s in SUBS:
            await catalog.create_subscription(
                Subscription(
                    project="shop",
                    name=s,
                    topic_project="shop",
                    topic="orders",
                    endpoint=Endpoint(url=f"{url}/{s}"),
                    signing_secret=SECRET,
                    max_in_flight=20,
                )
            )
        workers = [WorkerProcess(settings, tmp_path, f"w{i}-{unique}") for i in (1, 2)]
        try:
            async with Assigner(meta, catalog, "cp-test", interval_s=0.5):
                await asyncio.gather(*(w.ready() for w in workers))
                async with asyncio.timeout(30):
                    while len(holders := await _holders(meta)) < len(SUBS):
                        await asyncio.sleep(0.1)
                victim = next(w for w in workers if w.member in holders.values())
                survivor = next(w for w in workers if w is not victim)
                moved = [s for s, m in holders.items() if m == victim.member]
                ids = [f"m{i}" for i in range(TOTAL)]

                async def produce() -> None:
                    for start in range(0, TOTAL, 100):
                        records = [
                            Record(
                                m.encode(), key=m.encode(), headers=(("x-message-id", m.encode()),)
                            )
                            for m in ids[start : start + 100]
                        ]
                        results = await store.produce_many(storage, records)
                        assert not [r for r in results if isinstance(r, Exception)]
                        await asyncio.sleep(0.1)

                producing = asyncio.create_task(produce())
                try:
                    async with asyncio.timeout(90):
                        while min(len(set(got.get(s, []))) for s in moved) < TOTAL // 4:
                            await asyncio.sleep(0.02)
                except TimeoutError:
                    raise AssertionError(await _diagnosis(workers, meta, got)) from None
                victim.proc.send_signal(signal.SIGKILL)
                killed_at = time.monotonic()
                before = {s: len(set(got.get(s, []))) for s in moved}
                async with asyncio.timeout(SESSION_S * 5):
                    while any(m != survivor.member for m in (await _holders(meta)).values()) or len(
                        await _holders(meta)
                    ) < len(SUBS):
                        await asyncio.sleep(0.05)
                takeover = time.monotonic() - killed_at
                await producing
                async with asyncio.timeout(60):
                    while any(len(set(got.get(s, []))) < TOTAL for s in SUBS):
                        await asyncio.sleep(0.1)
        finally:
            for w in workers:
                w.stop()
            for child in await meta.children("/"):
                await meta.delete(f"/{child}", recursive=True)
            await store.delete_topic(storage)
    delivered = sum(len(v) for v in got.values())
    duplicates = delivered - sum(len(set(v)) for v in got.values())
    missing = sum(len(set(ids) - set(got.get(s, []))) for s in SUBS)
    print(
        f"\nkilled {victim.member} holding {moved} at {before} delivered; "
        f"takeover {takeover:.2f}s (session timeout {SESSION_S}s); "
        f"delivered={delivered} duplicates={duplicates} missing={missing}"
    )
    assert missing == 0
    assert takeover < SESSION_S * 3

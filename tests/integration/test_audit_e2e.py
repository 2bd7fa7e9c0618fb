"""End to end: a real load through the platform, a worker SIGKILLed midway, then the audit job.

A producer process and two worker processes run on real ZooKeeper and Kafka with their audit
trail on a Kafka audit topic; an Assigner runs in the test. Two subscriptions read the topic,
one with a filter (so ``filtered`` events are terminal outcomes too). Midway, the endpoint
holds every request (answering them 503 only after the kill, so no response it counted ever
reached the dead worker), waits for the workers' audit sinks to flush, and the worker holding a
subscription is SIGKILLed. The survivor takes over from the committed positions and redelivers
what the dead worker delivered after its last commit.

Then ``httpbus audit run`` (Spark reading the Kafka audit topic through spark-sql-kafka) must
report zero lost, nothing pending, every expected message accounted for, and exactly the
duplicate deliveries the endpoint acknowledged; the run is stored and served.
"""

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
import yaml
from aiohttp import web
from typer.testing import CliRunner

from control_plane.assigner import Assigner
from control_plane.cli import cli
from core.model import (
    Backend,
    CircuitBreakerPolicy,
    Endpoint,
    Project,
    RetryPolicy,
    Segment,
    SegmentState,
    Subscription,
    Topic,
)
from metastore import paths
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from reports.store import ReportStore
from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.maven import spark_jars
from segments.config import KafkaClusterConfig
from segments.registry import open_store
from tests.support.processes import ProducerProcess, WorkerProcess
from tests.support.services import RealServices

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
ADMIN = "audit-e2e-admin-token"
SUBS = {"all": None, "eu": 'headers["x-region"] == "eu"'}
TOTAL = 600
SESSION_S = 4.0


class Endpoint_:
    """Acknowledges deliveries (recording them) unless ``hold`` is on: then requests wait and
    are answered 503 once released, never recorded."""

    def __init__(self) -> None:
        self.acked: dict[str, list[str]] = {s: [] for s in SUBS}
        self.open = asyncio.Event()
        self.open.set()

    async def receive(self, request: web.Request) -> web.Response:
        if not self.open.is_set():
            await self.open.wait()
            return web.Response(status=503)
        await asyncio.sleep(0.002)
        self.acked[request.match_info["sub"]].append(request.headers["X-Message-Id"])
        return web.Response(status=204)

    def distinct(self, sub: str) -> int:
        return len(set(self.acked[sub]))

    def duplicates(self) -> int:
        return sum(len(v) - len(set(v)) for v in self.acked.values())


@pytest.fixture
async def endpoint() -> AsyncIterator[tuple[str, Endpoint_]]:
    ep = Endpoint_()
    app = web.Application()
    app.router.add_post("/hook/{sub}", ep.receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}/hook", ep
    finally:
        ep.open.set()
        await runner.cleanup()


async def _produce(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        for start in range(0, TOTAL, 30):

            async def one(i: int) -> None:
                region = "eu" if i % 3 == 0 else "us"
                r = await client.post(
                    "/v1/projects/shop/topics/orders/produce",
                    content=f"payload {i}".encode(),
                    headers={
                        "Authorization": f"Bearer {ADMIN}",
                        "X-Message-Id": f"m{i}",
                        "X-Region": region,
                    },
                )
                assert r.status_code == 201, r.text

            await asyncio.gather(*(one(i) for i in range(start, min(TOTAL, start + 30))))
            await asyncio.sleep(0.1)


async def _setup(catalog: Catalog, store: Any, storage: str, url: str) -> None:
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
    for name, expression in SUBS.items():
        await catalog.create_subscription(
            Subscription(
                project="shop",
                name=name,
                topic_project="shop",
                topic="orders",
                endpoint=Endpoint(url=f"{url}/{name}"),
                signing_secret=SECRET,
                filter=expression,
                max_in_flight=20,
                retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1_000),
                circuit_breaker=CircuitBreakerPolicy(enabled=False),
            )
        )


async def test_audit_after_a_worker_kill_reports_no_loss_and_the_exact_duplicates(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    endpoint: tuple[str, Endpoint_],
    spark: Any,
) -> None:
    url, ep = endpoint
    zk = ZooKeeperConfig(
        hosts=real_services.zookeeper, root=f"/audit-{unique}", session_timeout_s=SESSION_S
    )
    kafka = KafkaClusterConfig(bootstrap_servers=real_services.kafka)
    audit = {"cluster": "kafka-main", "topic": f"it.{unique}.audit"}
    common = {
        "metastore": zk.model_dump(),
        "clusters": {"kafka-main": kafka.model_dump()},
        "audit": audit,
    }
    # Commits far apart: what the victim delivered since its last commit is delivered again by
    # the survivor, so the run has duplicates to count.
    worker_settings = {**common, "commit_every_s": 30.0, "lock_retry_s": 0.2}
    storage = f"it.{unique}.orders.s1"
    expected = {"all": TOTAL, "eu": len(range(0, TOTAL, 3))}
    async with open_metastore(zk) as meta, open_store(kafka) as store:
        catalog = Catalog(meta)
        await _setup(catalog, store, storage, url)
        producer = ProducerProcess({**common, "admin_token": ADMIN}, tmp_path)
        producer.start()
        workers = [WorkerProcess(worker_settings, tmp_path, f"w{i}-{unique}") for i in (1, 2)]
        try:
            async with Assigner(meta, catalog, "cp-test", interval_s=0.5):
                await asyncio.gather(*(w.ready() for w in workers))
                async with asyncio.timeout(30):
                    while len(holders := await _holders_of(meta)) < len(SUBS):
                        await asyncio.sleep(0.1)
                victim = next(w for w in workers if w.member in holders.values())
                survivor = next(w for w in workers if w is not victim)
                producing = asyncio.create_task(_produce(producer.url))
                async with asyncio.timeout(90):
                    while ep.distinct("all") < TOTAL // 3:
                        await asyncio.sleep(0.02)
                ep.open.clear()  # hold every request; let the sinks flush what was delivered
                await asyncio.sleep(1.5)
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait(10)
                ep.open.set()
                await producing
                async with asyncio.timeout(120):
                    while any(ep.distinct(s) < n for s, n in expected.items()):
                        await asyncio.sleep(0.1)
                await asyncio.sleep(1.0)  # deliveries answered just now reach the trail
        finally:
            for w in workers:
                w.stop()  # SIGTERM: the survivor's sink writes what it holds
            producer.stop()
        # uvicorn re-raises the SIGTERM it handled (after the shutdown, sinks flushed): -15
        assert survivor.proc.returncode in (0, -signal.SIGTERM), survivor.log.read_text()[-2000:]
        try:
            cp_config = tmp_path / "cp.yaml"
            db = f"sqlite:///{tmp_path}/reports.db"
            cp_config.write_text(
                yaml.safe_dump(
                    {
                        **common,
                        "default_cluster": "kafka-main",
                        "database_url": db,
                        "spark_jars": spark_jars(DEFAULT_CACHE),
                    }
                )
            )
            t0 = time.monotonic()
            args = ["audit", "run", "--config", str(cp_config), "--since", "1h", "--horizon", "10m"]
            # In a thread: the CLI runs its own event loop (asyncio.run).
            result = await asyncio.to_thread(CliRunner().invoke, cli, args)
            took = time.monotonic() - t0
            # The streaming mode on the same trail: one availableNow pass, rows upserted.
            streaming = ["audit", "run", "--config", str(cp_config), "--mode", "streaming"]
            streaming += ["--once", "--checkpoint", str(tmp_path / "checkpoint")]
            streamed = await asyncio.to_thread(CliRunner().invoke, cli, streaming)
        finally:
            for child in await meta.children("/"):
                await meta.delete(f"/{child}", recursive=True)
            await store.delete_topic(storage)
            if await store.partitions(audit["topic"]) is not None:
                await store.delete_topic(audit["topic"])
    assert result.exit_code == 0, result.output
    print(f"\n{result.output}\naudit run took {took:.1f}s; endpoint duplicates {ep.duplicates()}")
    assert streamed.exit_code == 0, streamed.output
    reports = ReportStore.from_url(db)
    (run,) = reports.runs()
    full = reports.run(run.id)
    hourly = reports.hourly(subscription="shop/all")
    reports.close()
    # The streaming rows replaced the batch rows of the same windows, with the same counts
    # (exact copies of events are dropped; real redeliveries are counted).
    assert sum(r.delivered for r in hourly) == len(ep.acked["all"])
    assert sum(r.accepted for r in hourly) == TOTAL
    assert full is not None
    tallies = {t["subscription"]: t for t in json.loads(run.tallies)}
    assert (run.lost, run.late, run.pending) == (0, 0, 0)
    assert run.expected == 2 * TOTAL  # every message for both subscriptions
    assert tallies["shop/all"]["delivered"] == TOTAL
    assert tallies["shop/eu"]["delivered"] == expected["eu"]
    assert tallies["shop/eu"]["filtered"] == TOTAL - expected["eu"]
    assert ep.duplicates() > 0  # the kill did cause redeliveries
    assert run.duplicates == ep.duplicates()
    dup_ids = sorted(f.message_id for f in full.findings if f.kind == "duplicate")
    acked_twice = sorted(m for s in SUBS for m in set(ep.acked[s]) if ep.acked[s].count(m) > 1)
    assert dup_ids == acked_twice


async def _holders_of(meta: Any) -> dict[str, str]:
    out = {}
    for s in SUBS:
        node = await meta.get(paths.subscription_lock("shop", s))
        if node is not None:
            out[s] = json.loads(node.data)["member"]
    return out

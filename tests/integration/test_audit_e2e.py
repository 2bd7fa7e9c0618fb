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
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from cli import cli
from control_plane.leaders.assigner import Assigner
from core.model import (
    CircuitBreakerPolicy,
    RetryPolicy,
)
from metastore import paths
from reports.store import ReportStore
from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.maven import spark_jars
from tests.support.hook import Hook
from tests.support.processes import ProducerProcess
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
ADMIN = "audit-e2e-admin-token"
SUBS = {"all": None, "eu": 'headers["x-region"] == "eu"'}
TOTAL = 600
SESSION_S = 4.0


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


async def _setup(world: ProcessWorld) -> None:
    for name, expression in SUBS.items():
        await world.subscribe(
            name,
            filter=expression,
            max_in_flight=20,
            retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1_000),
            circuit_breaker=CircuitBreakerPolicy(enabled=False),
        )


def _distinct(hook: Hook, sub: str) -> int:
    return len(set(hook.ids(sub)))


def _duplicates(hook: Hook) -> int:
    return sum(len(hook.ids(s)) - len(set(hook.ids(s))) for s in SUBS)


async def test_audit_after_a_worker_kill_reports_no_loss_and_the_exact_duplicates(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    spark: Any,
) -> None:
    audit = {"cluster": "kafka-main", "topic": f"it.{unique}.audit"}
    expected = {"all": TOTAL, "eu": len(range(0, TOTAL, 3))}
    async with process_world(real_services, unique, tmp_path, session_timeout_s=SESSION_S) as world:
        ep = world.hook
        common = world.settings(audit=audit)
        await _setup(world)
        producer = ProducerProcess({**common, "admin_token": ADMIN}, tmp_path)
        producer.start()
        # Commits far apart: what the victim delivered since its last commit is delivered
        # again by the survivor, so the run has duplicates to count.
        members = [f"w{i}-{unique}" for i in (1, 2)]
        workers = world.workers(members, audit=audit, commit_every_s=30.0, lock_retry_s=0.2)
        try:
            async with Assigner(world.meta, world.catalog, "cp-test", interval_s=0.5):
                await asyncio.gather(*(w.ready() for w in workers))
                await world.all_held(list(SUBS))
                producing = asyncio.create_task(_produce(producer.url))
                await until(lambda: _distinct(ep, "all") >= TOTAL // 3, 90, "a third delivered")
                ep.open.clear()  # hold every request; let the sinks flush what was delivered
                await asyncio.sleep(1.5)  # no event to wait for: the sinks flush on a timer
                # The victim is whoever holds a subscription now: right after both workers
                # joined, the assigner may still move one (a first pick could end up holding
                # nothing, and its kill then proves nothing: no duplicates).
                holders = await world.all_held(list(SUBS))
                victim = next(w for w in workers if w.member in holders.values())
                survivor = next(w for w in workers if w is not victim)
                print(f"holders at the kill: {holders}; victim {victim.member}")
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait(10)
                ep.open.set()
                await producing
                try:
                    await until(
                        lambda: all(_distinct(ep, s) >= n for s, n in expected.items()),
                        120,
                        "every expected delivery",
                    )
                except AssertionError:
                    counts = {s: _distinct(ep, s) for s in SUBS}
                    held = await world.held(list(SUBS))
                    live = sorted(await world.meta.members("workers"))
                    plan = {
                        w: (node.data.decode() if node else None)
                        for w in await world.meta.children(paths.ASSIGNMENTS)
                        for node in [await world.meta.get(paths.assignment(w))]
                    }
                    print(f"delivered {counts} of {expected}; held now {held}")
                    print(f"live workers {live}; assignments {plan}")
                    # None: running; a negative number: the signal that ended it (-11 SIGSEGV)
                    print(f"survivor exit code {survivor.proc.poll()}")
                    print("zookeeper:", *real_services.expired_sessions(), sep="\n  ")
                    print(f"survivor log:\n{survivor.log.read_text()[-3000:]}")
                    raise
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
            if await world.store.partitions(audit["topic"]) is not None:
                await world.store.delete_topic(audit["topic"])
    assert result.exit_code == 0, result.output
    print(f"\n{result.output}\naudit run took {took:.1f}s; endpoint duplicates {_duplicates(ep)}")
    assert streamed.exit_code == 0, streamed.output
    reports = ReportStore.from_url(db)
    (run,) = reports.runs()
    full = reports.run(run.id)
    hourly = reports.hourly(subscription="shop/all")
    reports.close()
    # The streaming rows replaced the batch rows of the same windows, with the same counts
    # (exact copies of events are dropped; real redeliveries are counted).
    assert sum(r.delivered for r in hourly) == len(ep.ids("all"))
    assert sum(r.accepted for r in hourly) == TOTAL
    assert full is not None
    tallies = {t["subscription"]: t for t in json.loads(run.tallies)}
    assert (run.lost, run.late, run.pending) == (0, 0, 0)
    assert run.expected == 2 * TOTAL  # every message for both subscriptions
    assert tallies["shop/all"]["delivered"] == TOTAL
    assert tallies["shop/eu"]["delivered"] == expected["eu"]
    assert tallies["shop/eu"]["filtered"] == TOTAL - expected["eu"]
    assert _duplicates(ep) > 0  # the kill did cause redeliveries
    assert run.duplicates == _duplicates(ep)
    dup_ids = sorted(f.message_id for f in full.findings if f.kind == "duplicate")
    acked_twice = sorted(m for s in SUBS for m in set(ep.ids(s)) if ep.ids(s).count(m) > 1)
    assert dup_ids == acked_twice

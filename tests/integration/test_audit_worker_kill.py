"""A worker SIGKILLed under load: the duplicates the audit names are bounded by those the
endpoint saw, from both sides (issue 18, item 3).

The only worker of a subscription delivers a bounded-rate load (real ZooKeeper and Kafka, the
audit trail on a Kafka audit topic, a producer process, an Assigner in the test). Midway it is
SIGKILLed with requests in flight, nothing held back; once its lock is gone a second worker
starts and takes over from the committed positions. Then ``httpbus audit run`` reconciles.

Why not equality: every ``delivered`` event the audit names is a 2xx the endpoint answered, so
``audit duplicates <= endpoint duplicates``. The difference is the killed worker's deliveries
whose event was not durable yet: the sink writes every ``flush_interval_s`` (0.1 s), and a
commit waits for the events below it (``AuditSink.durable``), so those messages were not
committed and the second worker delivers them again -- a duplicate at the endpoint that the
trail shows once. Such a delivery reached the endpoint at most one flush interval, plus the
write of that flush and the answer's way back (``MARGIN_S``), before the kill. So
``endpoint duplicates <= audit duplicates + the victim's arrivals in that last stretch``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from typer.testing import CliRunner

from cli import cli
from control_plane.leaders.assigner import Assigner
from core.audit import FindingKind
from core.model import CircuitBreakerPolicy, RetryPolicy
from reports.store import ReportStore
from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.maven import spark_jars
from segments.reader import commit_group
from tests.support.processes import ProducerProcess
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
ADMIN = "audit-kill-admin-token"
SUB = "all"
TOTAL = 400
BATCH, PERIOD_S = 2, 0.02  # about 100 messages a second, smooth: the kill lands mid-stream
FLUSH_S = 0.1  # the audit sink's flush interval (segments.audit.AuditSink's default)
# The events of a delivery answered just before a flush began are written by that flush: its
# Kafka write (acks from the broker, a few to tens of ms here) and the answer's way back to
# the worker's loop (2 ms of endpoint delay, a loop shared with 20 deliveries in flight on a
# loaded 2-core machine) come on top of the interval. 0.3 s covers both with room.
MARGIN_S = 0.3
SESSION_S = 4.0


async def _produce(url: str) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def one(i: int) -> None:
            r = await client.post(
                "/v1/projects/shop/topics/orders/produce",
                content=f"payload {i}".encode(),
                headers={"Authorization": f"Bearer {ADMIN}", "X-Message-Id": f"m{i}"},
            )
            assert r.status_code == 201, r.text

        for start in range(0, TOTAL, BATCH):
            await asyncio.gather(*(one(i) for i in range(start, min(TOTAL, start + BATCH))))
            await asyncio.sleep(PERIOD_S)  # the load's rate, not a synchronisation


def _since(ep: Any, at: float) -> int:
    """How many distinct messages reached the endpoint from ``at`` on."""
    return len({r.id for r in ep.on(SUB) if r.at >= at})


async def _all_committed(world: Any) -> bool:
    """Whether the subscription's committed positions reach the end of its topic."""
    sub = await world.catalog.get_subscription("shop", SUB)
    topic = await world.catalog.get_topic("shop", "orders")
    storage = topic.segments[-1].storage_topic
    ends = await world.store.end_positions(storage)
    committed = await world.store.committed(storage, commit_group(sub))
    return all(committed.get(p, 0) >= end for p, end in ends.items() if end > 0)


def _audit_run(tmp_path: Path, common: dict[str, Any]) -> Any:
    """``httpbus audit run`` (the job the suite and operators run) into a SQLite store."""
    cp_config = tmp_path / "cp.yaml"
    db = f"sqlite:///{tmp_path}/reports.db"
    settings = {
        **common,
        "default_cluster": "kafka-main",
        "database_url": db,
        "spark_jars": spark_jars(DEFAULT_CACHE),
    }
    cp_config.write_text(yaml.safe_dump(settings))
    args = ["audit", "run", "--config", str(cp_config), "--since", "1h", "--horizon", "10m"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    reports = ReportStore.from_url(db)
    try:
        (run,) = reports.runs()
        return run, reports.run(run.id)
    finally:
        reports.close()


async def test_audit_duplicates_are_bounded_by_the_endpoints_after_a_kill_under_load(
    real_services: RealServices, unique: str, tmp_path: Path, spark: Any
) -> None:
    audit = {"cluster": "kafka-main", "topic": f"it.{unique}.audit"}
    async with process_world(real_services, unique, tmp_path, session_timeout_s=SESSION_S) as world:
        ep = world.hook
        common = world.settings(audit=audit)
        await world.subscribe(
            SUB,
            max_in_flight=20,
            retry=RetryPolicy(initial_delay_ms=100, max_delay_ms=1_000),
            circuit_breaker=CircuitBreakerPolicy(enabled=False),
        )
        producer = ProducerProcess({**common, "admin_token": ADMIN}, tmp_path)
        producer.start()
        # Commits far apart (the victim never commits): everything it delivered comes again,
        # so the audit's side of the bound has duplicates to count too. The successor commits
        # every second: the test waits for its commits to reach the end before stopping it.
        options: dict[str, Any] = {"audit": audit, "commit_every_s": 30.0, "lock_retry_s": 0.2}
        try:
            async with Assigner(world.meta, world.catalog, "cp-test", interval_s=0.5):
                [victim] = world.workers([f"w1-{unique}"], **options)
                await victim.ready()
                await world.all_held([SUB])
                producing = asyncio.create_task(_produce(producer.url))
                await until(lambda: len(set(ep.ids(SUB))) >= TOTAL // 3, 60, "a third delivered")
                killed_at = time.time()
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait(10)

                async def released() -> bool:
                    return await world.holder(SUB) != victim.member

                await until(released, 30, "the victim's lock gone (its session expired)")
                # Every request before this moment came from the victim: nobody else ran.
                successor_at = time.time()
                [successor] = world.workers([f"w2-{unique}"], **{**options, "commit_every_s": 1.0})
                await successor.ready()
                await producing
                # The victim never committed, so the successor delivers every message again:
                # until it has, the victim's deliveries whose events were not durable have no
                # outcome in the trail (the endpoint seeing every id is not enough).
                await until(lambda: _since(ep, successor_at) >= TOTAL, 120, "every message again")

                # ... and the successor has taken every answer: a commit waits for the audit
                # events below it to be durable, so once its positions reach the end no
                # delivered event of it is still held (at load 16 once, 7 answered deliveries
                # had none yet when it was stopped: "pending" 7).
                async def all_committed() -> bool:
                    return await _all_committed(world)

                await until(all_committed, 30, "the successor's commits at the end")
                successor.stop()  # SIGTERM: its sink writes what it holds before it exits
        finally:
            for w in world.processes:
                w.stop()
            producer.stop()
        assert successor.proc.returncode in (0, -signal.SIGTERM), successor.log.read_text()[-2000:]
        try:
            run, full = await asyncio.to_thread(_audit_run, tmp_path, common)
        finally:
            if await world.store.partitions(audit["topic"]) is not None:
                await world.store.delete_topic(audit["topic"])
    arrivals = ep.on(SUB)
    per_message = Counter(r.id for r in arrivals)
    endpoint_dups = sum(n - 1 for n in per_message.values())
    audit_dups = run.duplicates
    from_victim = [r for r in arrivals if r.at < successor_at]
    last_stretch = [r for r in from_victim if r.at >= killed_at - FLUSH_S - MARGIN_S]
    # Diagnostics: how long before the kill the unaudited deliveries reached the endpoint.
    audited = {f.message_id: f.count for f in full.findings if f.kind == FindingKind.DUPLICATE}
    unaudited = [m for m, n in per_message.items() if n > audited.get(m, 1)]
    ages = sorted(killed_at - max(r.at for r in from_victim if r.id == m) for m in unaudited)
    print(
        f"\naudit duplicates {audit_dups} <= endpoint duplicates {endpoint_dups} <= "
        f"{audit_dups} + {len(last_stretch)} (the victim's arrivals in the last "
        f"{FLUSH_S + MARGIN_S:.1f} s before the kill); {len(from_victim)} arrivals from the "
        f"victim; unaudited deliveries arrived {[round(a, 3) for a in ages]} s before the kill"
    )
    tallies = json.loads(run.tallies)
    assert (run.lost, run.late, run.pending) == (0, 0, 0), tallies
    assert run.expected == TOTAL and tallies[0]["delivered"] == TOTAL
    assert audit_dups > 0  # the kill did cause redeliveries, and the trail saw them
    assert audit_dups <= endpoint_dups <= audit_dups + len(last_stretch)

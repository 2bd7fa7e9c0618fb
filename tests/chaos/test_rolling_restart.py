"""Rolling restarts (an operator's routine: an upgrade, a setting changed) while a producer
service publishes and a worker process delivers: each node in turn stopped (SIGTERM) and
started again on its data, the next one once it serves again and a few seconds have passed;
the ZooKeeper ensemble (followers first, the leader last), and the three Kafka brokers
(replication 3, min ISR 2: a stopped broker moves its leaderships away first, so no write
waits on it, and acks=all holds with two in sync).

ZooKeeper:
Each restart drops the connections of the clients on that peer, which move to another in
the same session. A suspended connection no longer ends the worker's lease
(metastore/lease.py), so a follower's restart should fence nothing; the leader's costs an
election, during which no peer serves, and fences the worker only if it outlasts what is
left of its lease. What must hold (checker): no acknowledged message lost, no group out of
order, no process exited, publishing and delivery back within 15 s of the last restart, and
at most one fencing (the election's). Kafka: the same checks.
What is printed: each step's length, the longest time without a 201 and without a
delivery, the fencings in the worker's log and the redeliveries."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest

from tests.chaos.conftest import Cluster
from tests.chaos.delivering import Delivering, delivering
from tests.chaos.faults import replicated_kafka
from tests.support.machine import load_average
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 6.0
BETWEEN_S = 3.0  # after a peer serves again, before the next one stops
AFTER_S = 8.0  # the load on after the last restart
BACK_WITHIN_S = 15.0


async def _restart_gracefully(cluster: Cluster, name: str) -> None:
    """SIGTERM server ``name``, wait for it to exit, start it on its data; return once it
    serves."""
    proc = cluster.supervisor.running()[name]
    os.killpg(proc.pid, signal.SIGTERM)
    await until(lambda: name not in cluster.supervisor.running(), 30, f"{name} exited")
    cluster.supervisor.restart(name, die_with_parent=True, wait=False)
    await asyncio.to_thread(cluster.supervisor.wait, [name])


async def _roll(cluster: Cluster, names: list[str]) -> tuple[float, float, list[str]]:
    """Restart ``names`` in turn; returns (when it began, when the last served, each step)."""
    began = time.time()
    steps = []
    for name in names:
        step_at = time.time()
        await _restart_gracefully(cluster, name)
        steps.append(f"{name} {time.time() - step_at:.1f} s")
        await asyncio.sleep(BETWEEN_S)  # as an operator lets a node catch up
    return began, time.time() - BETWEEN_S, steps


def _report(what: str, run: Delivering, began: float, done_at: float, steps: list[str]) -> None:
    no_201, no_delivery = run.gaps(began)
    print(
        f"\nrolling restart of {what} in {done_at - began:.1f} s: {', '.join(steps)}; "
        f"the longest without a 201 {no_201:.2f} s, without a delivery "
        f"{no_delivery:.2f} s; load average {load_average()}"
    )


async def test_a_rolling_restart_of_zookeeper_loses_nothing(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    async with delivering(cluster, unique, tmp_path, SESSION_S) as run:
        modes = cluster.zookeeper_modes()
        order = sorted(modes, key=lambda n: (modes[n] == "leader", n))
        names = [f"zookeeper-{n}" for n in order]
        began, done_at, steps = await _roll(cluster, names)
        await asyncio.sleep(AFTER_S)  # publishing on after the last restart
        verdict = await run.settle(heal_at=done_at)
        _report("ZooKeeper (the leader last)", run, began, done_at, steps)
        fenced = run.worker.log.read_text(errors="replace").count("fenced off the lock")
    print(f"the worker fenced its lock {fenced} times; {verdict.summary()}")
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)
    # The worker's own peer restarts once and the leader's election suspends every client:
    # the code before measured 2 fencings (212 redeliveries), this 0; one is allowed for an
    # election that outlasts the lease on a loaded machine.
    assert fenced <= 1, f"the worker fenced its lock {fenced} times in a rolling restart"


async def test_a_rolling_restart_of_kafka_loses_nothing(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    kafka = replicated_kafka(cluster)
    async with delivering(cluster, unique, tmp_path, SESSION_S, kafka) as run:
        names = [f"kafka-{n}" for n in (1, 2, 3)]
        began, done_at, steps = await _roll(cluster, names)
        await asyncio.sleep(AFTER_S)  # publishing on after the last restart
        verdict = await run.settle(heal_at=done_at)
        _report("Kafka", run, began, done_at, steps)
    print(verdict.summary())
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)

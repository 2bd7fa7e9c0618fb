"""ZooKeeper partitioned (issue 34), on three peers each in a network namespace of its own
(fixture ``namespaced_cluster``), while a producer service publishes to a grouped topic and
a worker process delivers its subscription (session 6 s; ``tests/chaos/delivering.py``):

- the ensemble's leader split from its two followers both ways for 20 s, every client still
  reaching it: it loses its quorum and stops serving (its clients' connections closed), the
  two followers elect a leader of their own, the clients that were on the old leader
  reconnect to them (the worker on the same session); after the heal the old leader
  rejoins as a follower;
- the peer the worker's session is connected to cut off from everything (its link down) for
  20 s: the worker reconnects to another peer before its session lapses.

What must hold (checker): no acknowledged message lost, no group order inverted, no process
under test exited, publishing and delivery back within 15 s of the heal; and the worker's
lock the same node after the heal (an ephemeral node of its session, with a token of its
own: its session lived). About 2 minutes, the cluster's start and stop included."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from metastore import paths
from scripts.realservices import netns
from tests.chaos.checker import Verdict
from tests.chaos.conftest import Cluster
from tests.chaos.delivering import Delivering, delivering
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]

SESSION_S = 6.0
PARTITIONED_S = 20.0
RECOVER_S = 10.0  # the load on after the heal
BACK_WITHIN_S = 15.0
ADDRESS = re.compile(r"(\d+\.\d+\.\d+\.\d+:\d+)")


def _peers_of(cluster: Cluster, pids: dict[str, int]) -> dict[str, list[int]]:
    """The peers (by number) each of ``pids`` holds an established connection to."""
    peers = {address: n for n, address in enumerate(cluster.zookeeper.split(","), 1)}
    argv = ["ss", "-Htnp", "state", "established"]
    lines = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.splitlines()
    found: dict[str, list[int]] = {name: [] for name in pids}
    for line in lines:
        addresses = ADDRESS.findall(line)
        peer = peers.get(addresses[1]) if len(addresses) > 1 else None
        for name, pid in pids.items():
            if peer and f"pid={pid}," in line:
                found[name].append(peer)
    return found


def _pids(run: Delivering) -> dict[str, int]:
    """The ZooKeeper clients: the worker, the producer service and this test's metastore."""
    producer = run.producer.proc
    assert producer is not None
    return {"worker": run.worker.proc.pid, "producer": producer.pid, "test": os.getpid()}


class Fault:
    """A fault's times (``time.time()``) and what was seen, as one line of figures."""

    def __init__(self, cluster: Cluster, run: Delivering) -> None:
        self.cluster, self.run = cluster, run
        self.modes = cluster.zookeeper_modes()
        self.before = _peers_of(cluster, _pids(run))
        self.at = time.time()
        self.seen: dict[str, float] = {}
        self.notes: list[str] = []

    async def modes_now(self) -> dict[int, str]:
        return await asyncio.to_thread(self.cluster.zookeeper_modes)

    async def mark(
        self, what: str, condition: Callable[[], Awaitable[Any]], timeout: float
    ) -> None:
        """Wait (``until``) for ``condition``; note when it held, from the fault on."""
        await until(condition, timeout, what, interval=0.2)
        self.seen[what] = time.time() - self.at

    async def note(self, when: str) -> None:
        """The peers' modes and the clients' peers now."""
        peers = await asyncio.to_thread(_peers_of, self.cluster, _pids(self.run))
        self.notes.append(f"{when}: modes {await self.modes_now()}, clients' peers {peers}")

    async def last_out(self) -> None:
        """The rest of the fault's length."""
        await asyncio.sleep(max(0.0, self.at + PARTITIONED_S - time.time()))

    async def healed(self, node: int, lock: bytes, what: str) -> Verdict:
        """After the heal: peer ``node`` a follower again, the load on for ``RECOVER_S``, the
        checker's verdict (printed with the figures), and the worker's lock the same node,
        so the same session (it reconnected in time)."""
        healed_at = time.time()
        await self.mark(f"zookeeper-{node} a follower again", lambda: _rejoined(self, node), 30)
        await asyncio.sleep(RECOVER_S)  # the load on after the heal
        verdict = await self.run.settle(heal_at=healed_at)
        print(f"\n{what}: {self.report(healed_at, verdict)}")
        assert await _lock(self.run) == lock, "the worker's lock was taken anew: its session lapsed"
        return verdict

    def report(self, healed_at: float, verdict: Verdict) -> str:
        no_201, no_delivery = self.run.gaps(self.at)
        seen = ", ".join(f"{what} {s:.1f} s in" for what, s in self.seen.items())
        return (
            f"modes before {self.modes}; clients' peers before {self.before}; {seen}; "
            f"{'; '.join(self.notes)}; healed {healed_at - self.at:.1f} s in; longest without "
            f"a 201 from the fault {no_201:.2f} s, without a delivery {no_delivery:.2f} s\n"
            f"{verdict.summary()}"
        )


async def _lock(run: Delivering) -> bytes:
    """The worker's lock of ``s0``: its session's ephemeral node, with a token of its own."""
    node = await run.world.meta.get(paths.subscription_lock("shop", "s0"))
    assert node is not None, "s0 not held"
    return node.data


async def _leader_but(fault: Fault, node: int) -> int | None:
    """A leader other than peer ``node``, if one serves."""
    modes = await fault.modes_now()
    return next((n for n, m in modes.items() if n != node and m == "leader"), None)


async def _rejoined(fault: Fault, node: int) -> bool:
    modes = await fault.modes_now()
    return modes[node] == "follower" and list(modes.values()).count("leader") == 1


async def test_the_zookeeper_leader_partitioned_from_its_followers_loses_nothing(
    namespaced_cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    cluster = namespaced_cluster
    async with delivering(cluster, unique, tmp_path, SESSION_S) as run:
        fault = Fault(cluster, run)
        [node] = [n for n, mode in fault.modes.items() if mode == "leader"]
        one = cluster.zk_namespaces[node - 1]
        others = [ns for ns in cluster.zk_namespaces if ns is not one]
        pids = _pids(run)
        lock = await _lock(run)

        async def old_leader_stopped() -> bool:
            return (await fault.modes_now())[node] not in ("leader", "follower")

        async def moved() -> bool:
            peers = await asyncio.to_thread(_peers_of, cluster, pids)
            return all(p and node not in p for p in peers.values())

        netns.split(one, others)
        try:
            await fault.mark(f"zookeeper-{node} stopped serving", old_leader_stopped, 15)
            await fault.mark("a new leader", lambda: _leader_but(fault, node), PARTITIONED_S - 2)
            await fault.mark("every client on the majority", moved, PARTITIONED_S - 2)
            await fault.note("while split")
            await fault.last_out()
        finally:
            for ns in cluster.zk_namespaces:
                ns.heal()
        verdict = await fault.healed(node, lock, f"the leader zookeeper-{node} split off")
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)


async def test_the_peer_of_the_workers_session_cut_off_keeps_the_session(
    namespaced_cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    cluster = namespaced_cluster
    async with delivering(cluster, unique, tmp_path, SESSION_S) as run:
        fault = Fault(cluster, run)
        [node] = fault.before["worker"]
        lock = await _lock(run)
        pid = {"worker": run.worker.proc.pid}

        async def worker_moved() -> bool:
            [peers] = (await asyncio.to_thread(_peers_of, cluster, pid)).values()
            return bool(peers) and node not in peers

        cluster.zk_namespaces[node - 1].cut()
        try:
            await fault.mark("the worker on another peer", worker_moved, PARTITIONED_S - 2)
            await fault.mark("a leader of the other two", lambda: _leader_but(fault, node), 15)
            await fault.note("while cut off")
            await fault.last_out()
        finally:
            cluster.zk_namespaces[node - 1].heal()
        verdict = await fault.healed(node, lock, f"zookeeper-{node}, the worker's peer, cut off")
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)

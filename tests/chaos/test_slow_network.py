"""Latency and loss between httpbus and its servers (issue 34's matrix), where the kernel
has no netem: each Kafka node and each ZooKeeper peer of a three-node cluster behind a
toxiproxy proxy of its own (``ClusterPorts.free(proxies=True)``). A Kafka node advertises
its proxy, so the producer's writes, the worker's reads and commits, *and* the other
brokers' replication of its partitions all pass through it; each controller is a voter at
a proxy's port, so the KRaft quorum's own traffic and the brokers' heartbeats to the
active controller pass through proxies too; ZooKeeper's clients reach the peers through
theirs (the peers' quorum traffic is direct).

While a producer service publishes grouped sequences and a worker process delivers them,
for 20 s:

- **Kafka**: 100 ms (±50) each way on every node and every controller, and one connection
  in two cut after 4 KiB of answers, so connections keep failing mid-request and are
  opened again: the idempotent producer's retries, the reads' reconnects, the replicas'
  fetches, the quorum's fetches and votes and the brokers' heartbeats all go through it
  (replication 3, min ISR 2, acks=all).
- **ZooKeeper far away**: 900 ms (±50) each way on every peer, sessions of 9 s: nothing
  may be fenced (no redelivery).
- **A silent ZooKeeper peer**: 150 ms (±50) each way on every peer (sessions of 6 s), and
  the peer the worker is connected to silent (it takes every byte and answers none), so
  the worker must move to another peer before its session lapses.

What must hold (checker): no acknowledged message lost, no group out of order, no process
exited, publishing and delivery going on within the fault and back within 15 s of the heal.
What is printed: the rates, the longest time without a 201 and without a delivery, the
connections each proxy accepted meanwhile (the figures of docs/reliability.md)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from scripts.realservices.cluster import NODES, ClusterPorts
from tests.chaos.conftest import Cluster
from tests.chaos.delivering import Delivering, delivering
from tests.chaos.faults import replicated_kafka
from tests.support.machine import load_average
from tests.support.peers import owner
from tests.support.toxiproxy import Proxy, Toxiproxy, accepted, add_proxy, toxiproxy_server

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 6.0
FAULT_S = 20.0
AFTER_S = 10.0  # the load on after the heal
BACK_WITHIN_S = 15.0
STALL_S = 15.0  # publishing and delivery go on within the fault (it lasts 20 s)
ZK_LATENCY_MS = 150  # each way, the silent peer's test
# Each way: a round trip of 1.8 s (±0.1), between what the heartbeats stood before
# (a sixth of the session, 1.5 s) and the lease's bound with beats on their cadence (a
# third, 3 s).
SLOW_ZK_MS = 900
SLOW_SESSION_S = 9.0
CUT_AFTER = 4 * 1024  # bytes of answers after which one connection in two is cut


@dataclass
class Proxied:
    cluster: Cluster
    api: str  # toxiproxy's API
    log: Path  # toxiproxy's log: the connections each proxy accepted

    def opened(self, kind: str, since: float, until: float) -> dict[str, int]:
        """Connections accepted by each proxy of ``kind`` from ``since`` to ``until``."""
        seen = [a.proxy for a in accepted(self.log) if since <= a.at <= until]
        return {name: seen.count(name) for name in sorted(set(seen)) if name.startswith(kind)}

    def peer_of(self, pid: int) -> str:
        """The ZooKeeper proxy process ``pid`` is connected through now."""
        for conn in reversed(accepted(self.log)):
            if conn.proxy.startswith("zookeeper") and owner(conn.client_port, [pid]):
                return conn.proxy
        raise AssertionError(f"process {pid} holds no connection to a ZooKeeper proxy")

    @asynccontextmanager
    async def proxies(self, *kinds: str) -> AsyncIterator[list[Proxy]]:
        """The proxies in front of every node of each of ``kinds`` (``kafka``,
        ``controller``, ``zookeeper``)."""
        async with httpx.AsyncClient(base_url=self.api, timeout=10) as api:
            tox = Toxiproxy(api)
            names = [f"{kind}-{n}" for kind in kinds for n in range(1, NODES + 1)]
            yield [await tox.existing(name) for name in names]


@pytest.fixture(scope="module")
def proxied() -> Iterator[Proxied]:
    """The ensemble and three Kafka nodes, each behind a proxy made before it starts."""
    ports = ClusterPorts.free(proxies=True)
    run_dir = Path(tempfile.mkdtemp(prefix="httpbus-chaos-proxied-"))
    log = Path(tempfile.mkdtemp(prefix="httpbus-toxiproxy-")) / "toxiproxy.log"
    with toxiproxy_server(log) as api:
        for name, (listen, upstream) in ports.proxied().items():
            add_proxy(api, name, listen, upstream)
        built = Cluster(run_dir, ports=ports)
        built.supervisor.start(list(built.topology.servers), die_with_parent=True)
        try:
            yield Proxied(built, api, log)
        finally:
            built.supervisor.stop()


Toxic = tuple[Proxy, str, Mapping[str, float]]  # proxy, kind, attributes (+ toxicity, upstream)


async def _fault(proxies: list[Proxy], toxics: list[Toxic]) -> tuple[float, float]:
    """The toxics on for ``FAULT_S``, then every proxy cleared; the load on ``AFTER_S`` more.
    Returns (when the fault began, when it healed)."""
    fault_at = time.time()
    try:
        for proxy, kind, given in toxics:
            attributes = dict(given)
            toxicity = attributes.pop("toxicity", 1.0)
            stream = "upstream" if attributes.pop("upstream", 0) else "downstream"
            await proxy.toxic(kind, toxicity=toxicity, stream=stream, **attributes)
        await asyncio.sleep(FAULT_S)  # the fault's length (a pace, not a synchronisation)
    finally:
        for proxy in proxies:
            await proxy.clear()
    healed_at = time.time()
    await asyncio.sleep(AFTER_S)  # publishing on after the heal
    return fault_at, healed_at


def _report(what: str, run: Delivering, fault_at: float, healed_at: float) -> tuple[float, float]:
    """Print what the fault did to the load; return ``Delivering.gaps`` from the fault."""
    during = [s for at, s in run.load.answers if fault_at <= at < healed_at]
    after = [s for at, s in run.load.answers if healed_at <= at < healed_at + AFTER_S]
    no_201, no_delivery = run.gaps(fault_at)
    length = healed_at - fault_at
    print(
        f"\n{what} for {length:.1f} s: {during.count(201) / length:.0f} "
        f"publishes acknowledged a second ({after.count(201) / AFTER_S:.0f} after the heal), "
        f"{len(during) - during.count(201)} refused or failed; the longest without a 201 "
        f"{no_201:.2f} s, without a delivery {no_delivery:.2f} s; load average {load_average()}"
    )
    return no_201, no_delivery


async def test_kafka_behind_latency_and_cut_connections_loses_nothing(
    proxied: Proxied, unique: str, tmp_path: Path
) -> None:
    kafka = replicated_kafka(proxied.cluster)
    async with (
        delivering(proxied.cluster, unique, tmp_path, SESSION_S, kafka) as run,
        proxied.proxies("kafka", "controller") as proxies,
    ):
        toxics: list[Toxic] = [
            t
            for p in proxies
            for t in (
                (p, "latency", {"latency": 100, "jitter": 50}),
                (p, "latency", {"latency": 100, "jitter": 50, "upstream": 1}),
                (p, "limit_data", {"bytes": CUT_AFTER, "toxicity": 0.5}),
            )
        ]
        fault_at, healed_at = await _fault(proxies, toxics)
        verdict = await run.settle(heal_at=healed_at)
        what = (
            f"Kafka's brokers and controllers behind 100 ms each way, half the connections "
            f"cut after {CUT_AFTER} B"
        )
        gaps = _report(what, run, fault_at, healed_at)
    opened = proxied.opened("kafka", fault_at, healed_at)
    quorum = proxied.opened("controller", fault_at, healed_at)
    print(
        f"connections opened meanwhile to the brokers {opened}, to the controllers {quorum}; "
        f"{verdict.summary()}"
    )
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)
    assert sum(opened.values()) >= NODES, "no connection was cut: the fault did nothing"
    assert max(gaps) < STALL_S, f"publishing or delivery stalled through the fault: {gaps}"


def _both_ways(proxies: list[Proxy], latency_ms: int) -> list[Toxic]:
    """``latency_ms`` (±50) each way through every one of ``proxies``."""
    attributes = {"latency": latency_ms, "jitter": 50}
    return [(p, "latency", {**attributes, **up}) for p in proxies for up in ({}, {"upstream": 1})]


async def test_zookeeper_far_away_fences_nothing(
    proxied: Proxied, unique: str, tmp_path: Path
) -> None:
    """A round trip of 1.8 s on a 9 s session: a heartbeat every 1.5 s, a lease of 4.5 s
    from each one's send. While each heartbeat waited for its answer before the next, they
    were 3.3 s apart and the lease lapsed before the next answer (a fence, a runner restart
    and its redeliveries, on a live session); now they leave on their cadence."""
    async with (
        delivering(proxied.cluster, unique, tmp_path, SLOW_SESSION_S) as run,
        proxied.proxies("zookeeper") as proxies,
    ):
        fault_at, healed_at = await _fault(proxies, _both_ways(proxies, SLOW_ZK_MS))
        verdict = await run.settle(heal_at=healed_at)
        what = f"ZooKeeper behind {SLOW_ZK_MS} ms each way (sessions of {SLOW_SESSION_S:.0f} s)"
        gaps = _report(what, run, fault_at, healed_at)
    print(verdict.summary())
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)
    assert not verdict.duplicates, "a redelivery: the worker fenced its lock on a live session"
    assert max(gaps) < STALL_S, f"publishing or delivery stalled through the fault: {gaps}"


async def test_zookeeper_behind_latency_and_the_workers_peer_silent_loses_nothing(
    proxied: Proxied, unique: str, tmp_path: Path
) -> None:
    """The peer the worker is connected to takes every byte and answers none: the store
    leaves it once a heartbeat has gone a quarter of a session unanswered, before its lease
    (half a session from its last answered heartbeat's send) lapses, and goes on in the
    same session on another peer: no fence, no redelivery. (kazoo alone gives up on a
    server only after an unanswered ping, which it sends after a third of a session with
    nothing to send: never, while the worker writes its status every second.)"""
    async with (
        delivering(proxied.cluster, unique, tmp_path, SESSION_S) as run,
        proxied.proxies("zookeeper") as proxies,
    ):
        assert run.worker.proc and run.producer.proc
        silent = proxied.peer_of(run.worker.proc.pid)
        producers = proxied.peer_of(run.producer.proc.pid)
        [peer] = [p for p in proxies if p.name == silent]
        toxics = _both_ways(proxies, ZK_LATENCY_MS) + [
            (peer, "timeout", {"timeout": 0}),
            (peer, "timeout", {"timeout": 0, "upstream": 1}),
        ]
        fault_at, healed_at = await _fault(proxies, toxics)
        verdict = await run.settle(heal_at=healed_at)
        what = (
            f"ZooKeeper behind {ZK_LATENCY_MS} ms each way, the worker's peer ({silent}) "
            f"silent; the producer on {producers}"
        )
        gaps = _report(what, run, fault_at, healed_at)
    opened = proxied.opened("zookeeper", fault_at, healed_at)
    print(f"connections opened to ZooKeeper meanwhile: {opened}; {verdict.summary()}")
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)
    assert gaps[0] < STALL_S, f"publishing stalled through the fault: {gaps}"
    assert gaps[1] < SESSION_S, f"delivery stalled longer than a session: {gaps}"

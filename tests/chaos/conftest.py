"""The chaos tests' cluster: three ZooKeeper peers and three Kafka brokers (replication 3,
min ISR 2) on free ports (``pulsar_cluster``: the peers with three bookies and two Pulsar
brokers instead of Kafka), started once per test run for the chaos modules that ask for it
(they share it: a cluster takes a minute to start) by the project's own supervisor
(scripts/realservices/cluster.py), and stopped after them. And ``namespaces``: network
namespaces for the partition tests (scripts/realservices/netns.py; root only); ``cut_off``:
a partition test's world and the namespace its process under test runs in;
``namespaced_cluster``: the cluster with each Kafka node and each ZooKeeper peer in a
namespace of its own."""

from __future__ import annotations

import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import NamedTuple

import pytest

from scripts.realservices import netns
from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.cluster import (
    ClusterPorts,
    cluster_topology,
    kafka_namespaces,
    zookeeper_mode,
    zookeeper_namespaces,
)
from scripts.realservices.supervisor import Supervisor
from tests.support.services import RealServices
from tests.support.workers import ProcessWorld, process_world


class Cluster:
    def __init__(
        self,
        run_dir: Path,
        *,
        pulsar: bool = False,
        namespaces: bool = False,
        ports: ClusterPorts | None = None,
    ) -> None:
        self.ports = ports or ClusterPorts.free()
        self.topology = cluster_topology(self.ports, pulsar=pulsar, namespaces=namespaces)
        self.namespaces = kafka_namespaces() if namespaces else []  # Kafka node 1's first
        self.zk_namespaces = zookeeper_namespaces() if namespaces else []  # peer 1's first
        self.supervisor = Supervisor(run_dir, DEFAULT_CACHE, topology=self.topology)

    @property
    def zookeeper(self) -> str:
        return self.topology.endpoints["zookeeper"]

    @property
    def kafka(self) -> str:
        return self.topology.endpoints["kafka"]

    def zookeeper_modes(self) -> dict[int, str]:
        """Each peer's mode, by its number: ``leader``, ``follower`` or "" (not serving)."""
        peers = (peer.rsplit(":", 1) for peer in self.zookeeper.split(","))
        return {n: zookeeper_mode(int(port), host) for n, (host, port) in enumerate(peers, 1)}

    @property
    def pulsar(self) -> str:
        return self.topology.endpoints["pulsar"]

    @property
    def pulsar_admin(self) -> str:
        return self.topology.endpoints["pulsar_admin"]


@pytest.fixture(scope="package")
def cluster() -> Iterator[Cluster]:
    """The ensemble and three Kafka nodes, for the chaos tests that ask for it; stopped after
    the last chaos test, not held (six idle JVMs, ~0.2 of a core) through the unit tests that
    follow them in their lane."""
    built = Cluster(Path(tempfile.mkdtemp(prefix="httpbus-chaos-")))
    built.supervisor.start(list(built.topology.servers), die_with_parent=True)
    try:
        yield built
    finally:
        built.supervisor.stop()


@pytest.fixture(scope="module")
def namespaced_cluster() -> Iterator[Cluster]:
    """The three ZooKeeper peers and three Kafka nodes each in a network namespace of its
    own (root only), for the module that asks for it, stopped and the namespaces removed
    after it whatever happened (leftovers of the same names removed first)."""
    built = Cluster(Path(tempfile.mkdtemp(prefix="httpbus-chaos-netns-")), namespaces=True)
    with netns.hosts([*built.namespaces, *built.zk_namespaces]):
        built.supervisor.start(list(built.topology.servers), die_with_parent=True)
        try:
            yield built
        finally:
            built.supervisor.stop()


@pytest.fixture(scope="module")
def pulsar_cluster() -> Iterator[Cluster]:
    """The ensemble with three bookies and two Pulsar brokers on it, no Kafka (40 s to
    start): for the module that asks for it, stopped after it."""
    built = Cluster(Path(tempfile.mkdtemp(prefix="httpbus-chaos-pulsar-")), pulsar=True)
    names = [name for name in built.topology.servers if not name.startswith("kafka")]
    built.supervisor.start(names, die_with_parent=True)
    try:
        yield built
    finally:
        built.supervisor.stop(grace=5)  # a broker takes 20 s to stop; its data goes anyway


@pytest.fixture
def namespaces() -> Iterator[Callable[[str], netns.Namespace]]:
    """Make a network namespace by tag (``namespaces("w1")``); what an earlier, failed run
    left behind is removed first, and every namespace made here after the test, whatever
    happened."""
    netns.clean()
    made: list[netns.Namespace] = []

    def make(tag: str) -> netns.Namespace:
        ns = netns.Namespace(tag, len(made) + 1)
        made.append(ns)
        ns.create()
        return ns

    try:
        yield make
    finally:
        for ns in made:
            ns.destroy()


class CutOff(NamedTuple):
    """What a partition test works on: the namespace to start its process under test in,
    the world (tests/support/workers.py), and ZooKeeper's port, the one to partition."""

    ns: netns.Namespace
    world: ProcessWorld
    zookeeper_port: int


CutOffWorld = Callable[[str, float], AbstractAsyncContextManager[CutOff]]


@pytest.fixture
def cut_off(
    real_services: RealServices,
    unique: str,
    tmp_path: Path,
    namespaces: Callable[[str], netns.Namespace],
) -> CutOffWorld:
    """``async with cut_off(tag, session_s) as (ns, world, zk_port)``: a namespace by ``tag``
    and a :func:`~tests.support.workers.process_world` on the suite's single-node servers
    (a grouped topic, ZooKeeper sessions of ``session_s``), torn down on the way out; the
    namespace is removed after the test."""

    @asynccontextmanager
    async def make(tag: str, session_s: float) -> AsyncIterator[CutOff]:
        ns = namespaces(tag)
        zk_port = int(real_services.zookeeper.rsplit(":", 1)[1])
        async with process_world(
            real_services, unique, tmp_path, grouped=True, session_timeout_s=session_s
        ) as world:
            yield CutOff(ns, world, zk_port)

    return make

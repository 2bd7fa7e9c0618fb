"""The chaos tests' cluster: three ZooKeeper peers and three Kafka brokers (replication 3,
min ISR 2) on free ports, started once per test run for the chaos modules that ask for it
(they share it: a cluster takes a minute to start) by the project's own supervisor
(scripts/realservices/cluster.py), and stopped after them."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.cluster import ClusterPorts, cluster_topology
from scripts.realservices.supervisor import Supervisor


class Cluster:
    def __init__(self, run_dir: Path) -> None:
        self.ports = ClusterPorts.free()
        self.topology = cluster_topology(self.ports)
        self.supervisor = Supervisor(run_dir, DEFAULT_CACHE, topology=self.topology)

    @property
    def zookeeper(self) -> str:
        return self.topology.endpoints["zookeeper"]

    @property
    def kafka(self) -> str:
        return self.topology.endpoints["kafka"]


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    built = Cluster(Path(tempfile.mkdtemp(prefix="httpbus-chaos-")))
    built.supervisor.start(list(built.topology.servers), die_with_parent=True)
    try:
        yield built
    finally:
        built.supervisor.stop()

"""Leaders killed while a producer service publishes (issue 34's chaos smoke), on three Kafka
brokers (replication 3, min ISR 2, acks=all) and a three-peer ZooKeeper ensemble: the
leader of a partition, or the ensemble's leader, SIGKILLed and restarted on its data.
Every acknowledged message is stored, each group's in the order it was acknowledged, and
publishing answers 201 again within 15 s."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from core.model import Project, Topic
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from scripts.realservices.cluster import zookeeper_mode
from segments.config import KafkaClusterConfig
from segments.registry import open_store
from tests.chaos.conftest import Cluster
from tests.chaos.faults import ADMIN, Load, kill_and_restart
from tests.support.processes import ProducerProcess
from tests.support.stored import read_to_end
from tests.support.world import segment

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
GROUPS = 12


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(meta.topics[topic].partitions[partition].leader)


@dataclass
class Outcome:
    acked: set[tuple[str, int]]
    order: dict[str, list[int]]  # per group, the stored order of first occurrences
    stored: int
    refused: list[int]
    gap: float  # the longest time without a 201 after the fault

    def check(self, fault: str) -> None:
        stored = {(g, s) for g, seqs in self.order.items() for s in seqs}
        lost = sorted(self.acked - stored)
        print(
            f"\n{fault}: {len(self.acked)} acknowledged, {self.stored} stored, {len(lost)} "
            f"lost, {len(self.refused)} refused or failed ({sorted(set(self.refused))}), "
            f"longest time without a 201 after the fault {self.gap:.2f}s"
        )
        assert not lost, lost[:20]
        assert all(seqs == sorted(seqs) for seqs in self.order.values()), "a group reordered"
        assert self.gap < 15, f"publishing did not answer 201 for {self.gap:.1f} s"


Fault = Callable[[Cluster, str], Awaitable[str]]  # (cluster, storage topic) → what it did


async def _publish_through(cluster: Cluster, unique: str, tmp_path: Path, fault: Fault) -> Outcome:
    """A grouped topic (4 partitions) on the cluster, a producer service, a client per
    group; ``fault`` 3 s into the load, the load on for 15 s more; then every record read."""
    zk = ZooKeeperConfig(hosts=cluster.zookeeper, root=f"/chaos-{unique}", session_timeout_s=6)
    kafka = KafkaClusterConfig(
        bootstrap_servers=cluster.kafka,
        replication_factor=3,
        min_insync_replicas=2,
        produce_timeout_s=10,
    )
    storage = f"chaos.{unique}.orders.s1"
    async with open_metastore(zk) as meta, open_store(kafka) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await store.create_topic(storage, 4, retention_ms=3_600_000)
        seg = segment("kafka-main", storage=storage, partitions=4)
        await catalog.create_topic(Topic(project="shop", name="orders", grouped=True), seg)
        settings = {
            "admin_token": ADMIN,
            "metastore": zk.model_dump(),
            "clusters": {"kafka-main": kafka.model_dump()},
        }
        with ProducerProcess(settings, tmp_path) as producer:
            load = Load(producer.url)
            clients = [asyncio.create_task(load.group(f"g{i:02d}")) for i in range(GROUPS)]
            try:
                await asyncio.sleep(3)  # publishing under way (a pace, not a synchronisation)
                fault_at = time.time()
                done = await fault(cluster, storage)
                await asyncio.sleep(max(0.0, fault_at + 15 - time.time()))
            finally:
                load.stop.set()
                await asyncio.gather(*clients, return_exceptions=True)
        stored = await read_to_end(store, storage, deadline_s=90)  # the cluster goes after
    order: dict[str, list[int]] = {}
    for msg in sorted(stored, key=lambda m: (m.partition, m.position)):
        group, seq = msg.value.decode().split(":")
        if int(seq) not in order.setdefault(group, []):
            order[group].append(int(seq))
    acked = {(g, s) for g, seqs in load.acked.items() for s in seqs}
    refused = [s for _, s in load.answers if s != 201]
    print(f"\n{done}")
    return Outcome(acked, order, len(stored), refused, load.longest_gap_after(fault_at))


async def test_the_partition_leader_killed_under_load_loses_nothing(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    async def kill_the_leader(cluster: Cluster, storage: str) -> str:
        node = await asyncio.to_thread(_leader, cluster.kafka, storage, 0)
        await kill_and_restart(cluster, f"kafka-{node}", down_s=10)
        return f"kafka-{node}, the leader of partition 0, killed and restarted after 10 s"

    outcome = await _publish_through(cluster, unique, tmp_path, kill_the_leader)
    outcome.check("the partition leader killed")


async def test_the_zookeeper_leader_killed_under_load_loses_nothing(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    """The producers' metadata (topics, cutover gates, quotas) lives in ZooKeeper; losing its
    leader is an election of a moment for the other two, and publishing goes on."""

    async def kill_the_leader(cluster: Cluster, storage: str) -> str:
        modes = {n: zookeeper_mode(p) for n, p in enumerate(cluster.ports.zookeeper, start=1)}
        [node] = [n for n, mode in modes.items() if mode == "leader"]
        await kill_and_restart(cluster, f"zookeeper-{node}", down_s=5)
        return f"zookeeper-{node}, the ensemble's leader ({modes}), killed and restarted after 5 s"

    outcome = await _publish_through(cluster, unique, tmp_path, kill_the_leader)
    outcome.check("the ZooKeeper leader killed")

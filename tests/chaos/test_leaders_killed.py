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
from tests.chaos.checker import Delivery, Verdict, check
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
    verdict: Verdict
    stored: int

    def check(self, fault: str) -> None:
        print(f"\n{fault}: {self.stored} records stored; {self.verdict.summary()}")
        self.verdict.assert_sound(back_within_s=15)


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
    records = sorted(stored, key=lambda m: (m.partition, m.position))
    # The storage's order stands for the deliveries' (untimed: loss, order, duplicates).
    kept = [
        Delivery(m.value.decode().replace(":", "-"), _group(m.value), "kafka", 0) for m in records
    ]
    print(f"\n{done}")
    # Publishing back: the longest time without a 201 from the fault on.
    return Outcome(check(load.history(kept), heal_at=fault_at), len(stored))


def _group(value: bytes) -> str:
    return value.decode().split(":")[0]


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

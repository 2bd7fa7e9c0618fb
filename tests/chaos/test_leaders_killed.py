"""Leaders killed while a producer service publishes (issue 34's chaos smoke), on three Kafka
brokers (replication 3, min ISR 2, acks=all) and a three-peer ZooKeeper ensemble: the
leader of a partition, or the ensemble's leader, SIGKILLed and restarted on its data.
Every acknowledged message is stored, each group's in the order it was acknowledged, and
publishing answers 201 again within 15 s."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from scripts.realservices.cluster import zookeeper_mode
from tests.chaos.conftest import Cluster
from tests.chaos.faults import kill_and_restart, publish_through, replicated_kafka

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]


def _leader(bootstrap: str, topic: str, partition: int) -> int:
    meta = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return int(meta.topics[topic].partitions[partition].leader)


async def test_the_partition_leader_killed_under_load_loses_nothing(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    async def kill_the_leader(cluster: Cluster, storage: str) -> str:
        node = await asyncio.to_thread(_leader, cluster.kafka, storage, 0)
        await kill_and_restart(cluster, f"kafka-{node}", down_s=10)
        return f"kafka-{node}, the leader of partition 0, killed and restarted after 10 s"

    outcome = await publish_through(
        cluster, unique, tmp_path, replicated_kafka(cluster), kill_the_leader
    )
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

    outcome = await publish_through(
        cluster, unique, tmp_path, replicated_kafka(cluster), kill_the_leader
    )
    outcome.check("the ZooKeeper leader killed")

"""A broker partitioned from the other two (issue 34), on three Kafka nodes each in a network
namespace of its own (replication 3, min ISR 2, acks=all): the leader of partition 0 cut
off from the other brokers both ways for 20 s, while every client still reaches it and it
them, under a producer service's load; then healed.

The isolated node cannot acknowledge a write alone: its followers fetch nothing, so acks=all
waits, and it cannot shrink the ISR without the controller quorum, which fences it (no
heartbeat for the broker session, 9 s) and moves the leadership to a node of the majority.
What must hold (checker): no acknowledged message lost, no group order inverted, the
leadership moved while partitioned, publishing back within 15 s of the heal."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scripts.realservices import netns
from tests.chaos.conftest import Cluster
from tests.chaos.faults import publish_through, replicated_kafka
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]

PARTITIONED_S = 20.0
RECOVER_S = 10.0  # the load on after the heal

# Run inside a namespace: the leader of a partition as its broker(s) see it, or -1.
LEADER = """
import sys
from confluent_kafka.admin import AdminClient
try:
    admin = AdminClient({"bootstrap.servers": sys.argv[1], "log_level": 0})
    meta = admin.list_topics(sys.argv[2], timeout=3)
    print(meta.topics[sys.argv[2]].partitions[0].leader)
except Exception:
    print(-1)
"""


def _leader(bootstrap: str, topic: str, ns: netns.Namespace | None = None) -> int:
    """Partition 0's leader, asked from ``ns`` (the root namespace when None): from a
    namespace of the majority, the isolated node is out of reach, so the answer is the
    quorum's and not the isolated node's stale one."""
    argv = [sys.executable, "-c", LEADER, bootstrap, topic]
    done = subprocess.run(
        ns.exec_argv(argv) if ns else argv, capture_output=True, text=True, timeout=15
    )
    return int(done.stdout.strip() or -1)


async def test_the_leader_partitioned_from_the_other_brokers_loses_nothing(
    namespaced_cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    async def partition_the_leader(cluster: Cluster, storage: str) -> str:
        node = await asyncio.to_thread(_leader, cluster.kafka, storage)
        assert node > 0, "partition 0 has no leader"
        one = cluster.namespaces[node - 1]
        others = [ns for ns in cluster.namespaces if ns is not one]
        majority = ",".join(b for n, b in enumerate(cluster.kafka.split(","), 1) if n != node)

        async def moved_to() -> int | None:
            leader = await asyncio.to_thread(_leader, majority, storage, others[0])
            return None if leader in (node, -1) else leader

        began = time.time()
        netns.split(one, others)
        try:
            leader = await until(
                moved_to,
                timeout=PARTITIONED_S - 2,
                interval=0.5,
                what=f"the quorum to move partition 0's leadership off kafka-{node}",
            )
            moved_s = time.time() - began
            await asyncio.sleep(max(0.0, began + PARTITIONED_S - time.time()))  # the fault's length
        finally:
            for ns in cluster.namespaces:
                ns.heal()
        return (
            f"kafka-{node}, the leader of partition 0, partitioned from the other two brokers "
            f"for {time.time() - began:.1f} s; the quorum's view: leader {leader} "
            f"{moved_s:.1f} s in"
        )

    outcome = await publish_through(
        namespaced_cluster,
        unique,
        tmp_path,
        replicated_kafka(namespaced_cluster),
        partition_the_leader,
        recover_s=RECOVER_S,
    )
    print(
        f"longest without a 201 from the partition on: {outcome.outage_s:.2f} s; "
        f"503 answers: {outcome.verdict.refused.get(503, 0)}; "
        f"publishing back within {outcome.verdict.publish_back_s:.2f} s of the heal"
    )
    outcome.check("a broker partitioned from the others")

"""A bookie killed while a producer service publishes (issue 34), on a Pulsar cluster of
three bookies and two brokers (every ledger on all three, ack quorum 2) over a three-peer
ZooKeeper ensemble: one bookie SIGKILLed 3 s into the load and restarted on its data 10 s
later, the load on for 15 s from the kill. Every acknowledged message is stored, each
group's in the order it was acknowledged, and publishing answers 201 again within 15 s."""

from __future__ import annotations

from pathlib import Path

import pytest

from segments.config import PulsarClusterConfig
from tests.chaos.conftest import Cluster
from tests.chaos.faults import kill_and_restart, publish_through

pytestmark = [pytest.mark.zookeeper, pytest.mark.pulsar]


async def test_a_bookie_killed_under_load_loses_nothing(
    pulsar_cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    cluster = pulsar_cluster
    pulsar = PulsarClusterConfig(service_url=cluster.pulsar, admin_url=cluster.pulsar_admin)

    async def kill_a_bookie(cluster: Cluster, storage: str) -> str:
        await kill_and_restart(cluster, "bookie-2", down_s=10)
        return "bookie-2 killed, restarted after 10 s"

    outcome = await publish_through(cluster, unique, tmp_path, pulsar, kill_a_bookie)
    outcome.check("a bookie killed")

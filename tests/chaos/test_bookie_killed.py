"""A bookie killed while a producer service publishes (issue 34), on a Pulsar cluster of
three bookies and two brokers (every ledger on all three, ack quorum 2) over a three-peer
ZooKeeper ensemble: one bookie SIGKILLed 3 s into the load and restarted on its data 10 s
later, the load on for 15 s from the kill. Every acknowledged message is stored, each
group's in the order it was acknowledged, and publishing answers 201 again within 15 s."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from core.model import Project, Topic
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import PulsarClusterConfig
from segments.registry import open_store
from tests.chaos.checker import Delivery, check
from tests.chaos.conftest import Cluster
from tests.chaos.faults import ADMIN, Load, kill_and_restart
from tests.support.processes import ProducerProcess
from tests.support.stored import read_to_end
from tests.support.world import segment

pytestmark = [pytest.mark.zookeeper, pytest.mark.pulsar]
GROUPS = 12


async def test_a_bookie_killed_under_load_loses_nothing(
    pulsar_cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    cluster = pulsar_cluster
    zk = ZooKeeperConfig(hosts=cluster.zookeeper, root=f"/chaos-{unique}", session_timeout_s=6)
    pulsar = PulsarClusterConfig(service_url=cluster.pulsar, admin_url=cluster.pulsar_admin)
    storage = f"chaos.{unique}.orders.s1"
    async with open_metastore(zk) as meta, open_store(pulsar) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await store.create_topic(storage, 4, retention_ms=3_600_000)
        seg = segment("pulsar-main", storage=storage, partitions=4)
        await catalog.create_topic(Topic(project="shop", name="orders", grouped=True), seg)
        settings = {
            "admin_token": ADMIN,
            "metastore": zk.model_dump(),
            "clusters": {"pulsar-main": pulsar.model_dump()},
        }
        with ProducerProcess(settings, tmp_path) as producer:
            load = Load(producer.url)
            clients = [asyncio.create_task(load.group(f"g{i:02d}")) for i in range(GROUPS)]
            try:
                await asyncio.sleep(3)  # publishing under way (a pace, not a synchronisation)
                killed_at = time.time()
                await kill_and_restart(cluster, "bookie-2", down_s=10)
                await asyncio.sleep(max(0.0, killed_at + 15 - time.time()))
            finally:
                load.stop.set()
                await asyncio.gather(*clients, return_exceptions=True)
        # Pulsar's positions are not dense: the acknowledged count ends the read (a read
        # takes up to 1,000 records a partition, so a retry's duplicate cuts nothing short).
        acked = sum(len(seqs) for seqs in load.acked.values())
        stored = await read_to_end(store, storage, expected=acked, deadline_s=90)
    records = sorted(stored, key=lambda m: (m.partition, m.position))
    # The storage's order stands for the deliveries' (untimed: loss, order, duplicates).
    kept = [Delivery(_id(m.value), _id(m.value).split("-")[0], "pulsar", 0) for m in records]
    verdict = check(load.history(kept), heal_at=killed_at)
    print(f"\nbookie-2 killed, restarted after 10 s: {len(stored)} stored; {verdict.summary()}")
    verdict.assert_sound(back_within_s=15)


def _id(value: bytes) -> str:
    return value.decode().replace(":", "-")

"""What the chaos tests share: the publishing load (a client per group), the faults done
to the cluster's servers (SIGKILL, then a restart on their data), and a fault done under a
producer service's load with every stored record read back (:func:`publish_through`)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from core.model import Project, Topic
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import Stored
from segments.registry import open_store
from tests.chaos.checker import Delivery, History, Verdict, check, longest_gap
from tests.chaos.conftest import Cluster
from tests.support.processes import ProducerProcess
from tests.support.stored import read_to_end
from tests.support.world import segment

ADMIN = "chaos-admin-token"
URL = "/v1/projects/shop/topics/orders/produce"


@dataclass
class Load:
    """One client per group, each publishing its sequence in order: a refused or failed
    publish is retried until acknowledged, as an ordering client must."""

    url: str
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    acked: dict[str, list[int]] = field(default_factory=dict)
    published: dict[str, list[str]] = field(default_factory=dict)  # group → ids tried, in order
    answers: list[tuple[float, int]] = field(default_factory=list)  # (time, status; 0: error)

    async def group(self, group: str) -> None:
        seq = 0
        headers = {"Authorization": f"Bearer {ADMIN}", "X-Group-Id": group}
        async with httpx.AsyncClient(base_url=self.url, timeout=15) as client:
            while not self.stop.is_set():
                mid = f"{group}-{seq}"
                tried = self.published.setdefault(group, [])
                if not tried or tried[-1] != mid:
                    tried.append(mid)
                try:
                    r = await client.post(
                        URL,
                        content=f"{group}:{seq}".encode(),
                        headers={**headers, "X-Message-Id": mid},
                    )
                    status = r.status_code
                except httpx.HTTPError:
                    status = 0
                self.answers.append((time.time(), status))
                if status == 201:
                    self.acked.setdefault(group, []).append(seq)
                    seq += 1
                else:
                    await asyncio.sleep(0.05)  # a client's retry pace

    def history(self, deliveries: list[Delivery]) -> History:
        """What the clients recorded, with what the receivers (or the storage) got."""
        acked = {f"{g}-{s}" for g, seqs in self.acked.items() for s in seqs}
        return History(self.published, acked, list(self.answers), deliveries)


def merged(loads: list[Load], deliveries: list[Delivery]) -> History:
    """The histories of several loads (producers) as one, with ``deliveries``."""
    published: dict[str, list[str]] = {}
    acked: set[str] = set()
    answers: list[tuple[float, int]] = []
    for load in loads:
        history = load.history(deliveries)
        published.update(history.published)
        acked |= history.acked
        answers += history.answers
    return History(published, acked, sorted(answers), deliveries)


def replicated_kafka(cluster: Cluster) -> KafkaClusterConfig:
    """The cluster's Kafka as production runs it: replication factor 3, min ISR 2."""
    return KafkaClusterConfig(
        bootstrap_servers=cluster.kafka,
        replication_factor=3,
        min_insync_replicas=2,
        produce_timeout_s=10,
    )


async def kill_and_restart(cluster: Cluster, name: str, down_s: float) -> None:
    """SIGKILL server ``name``, and start it again on its data ``down_s`` later."""
    await kill_for(cluster, [name], down_s)


async def kill_for(cluster: Cluster, names: list[str], down_s: float) -> float:
    """SIGKILL the servers ``names`` at once, and start them again ``down_s`` later; return
    when they answer, with the time (``time.time()``) their restart began."""
    running = cluster.supervisor.running()
    for name in names:
        os.killpg(running[name].pid, signal.SIGKILL)
    await asyncio.sleep(down_s)
    restarted_at = time.time()
    for name in names:
        cluster.supervisor.restart(name, die_with_parent=True, wait=False)
    await asyncio.to_thread(cluster.supervisor.wait, names)
    return restarted_at


GROUPS = 12  # clients of publish_through, one per group
Fault = Callable[[Cluster, str], Awaitable[str]]  # (cluster, storage topic) → what it did


@dataclass
class Outcome:
    verdict: Verdict
    stored: int
    outage_s: float = 0.0  # the longest time without a 201 from the fault on

    def check(self, fault: str) -> None:
        print(f"\n{fault}: {self.stored} records stored; {self.verdict.summary()}")
        self.verdict.assert_sound(back_within_s=15)


async def publish_through(
    cluster: Cluster,
    unique: str,
    tmp_path: Path,
    storage_cluster: KafkaClusterConfig | PulsarClusterConfig,
    fault: Fault,
    recover_s: float | None = None,
) -> Outcome:
    """A grouped topic (4 partitions) on ``storage_cluster``, a producer service, a client
    per group; ``fault`` 3 s into the load, the load on for 15 s more; then every record
    read back, its storage order standing for the deliveries' (untimed: loss, order,
    duplicates), and publishing back measured from the fault. ``recover_s``: a fault that
    returns when healed (a partition) instead, the load on for that long after it returns,
    and publishing back measured from then."""
    zk = ZooKeeperConfig(hosts=cluster.zookeeper, root=f"/chaos-{unique}", session_timeout_s=6)
    backend = storage_cluster.backend
    storage = f"chaos.{unique}.orders.s1"
    async with open_metastore(zk) as meta, open_store(storage_cluster) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        await store.create_topic(storage, 4, retention_ms=3_600_000)
        seg = segment(f"{backend}-main", storage=storage, partitions=4)
        await catalog.create_topic(Topic(project="shop", name="orders", grouped=True), seg)
        settings = {
            "admin_token": ADMIN,
            "metastore": zk.model_dump(),
            "clusters": {f"{backend}-main": storage_cluster.model_dump()},
        }
        with ProducerProcess(settings, tmp_path) as producer:
            load = Load(producer.url)
            clients = [asyncio.create_task(load.group(f"g{i:02d}")) for i in range(GROUPS)]
            try:
                await asyncio.sleep(3)  # publishing under way (a pace, not a synchronisation)
                fault_at = time.time()
                done = await fault(cluster, storage)
                healed_at = fault_at if recover_s is None else time.time()
                await asyncio.sleep(max(0.0, fault_at + 15 - time.time(), recover_s or 0.0))
            finally:
                load.stop.set()
                await asyncio.gather(*clients, return_exceptions=True)
        # Kafka's positions are dense: read to the end. Pulsar's are not: the read ends once
        # every acknowledged message is found. (A count ended it once, in CI: 12 retries'
        # duplicates made 421 records read reach the 415 acknowledged with 6 of them unread.)
        acked = {f"{g}:{s}".encode() for g, seqs in load.acked.items() for s in seqs}

        def all_acked(read: list[Stored]) -> bool:
            return backend != "kafka" and acked <= {m.value for m in read}

        stored = await read_to_end(store, storage, until=all_acked, deadline_s=90)
    records = sorted(stored, key=lambda m: (m.partition, m.position))
    ids = [m.value.decode().replace(":", "-") for m in records]
    kept = [Delivery(mid, mid.split("-")[0], backend, 0) for mid in ids]
    print(f"\n{done}")
    ok = [at for at, status in load.answers if status == 201]
    verdict = check(load.history(kept), heal_at=healed_at)
    return Outcome(verdict, len(stored), longest_gap(ok, fault_at))

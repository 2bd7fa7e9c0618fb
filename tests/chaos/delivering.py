"""A fault done under delivery (issue 34): on a chaos cluster, a producer service publishing
to a grouped topic (a client per group) and a worker process delivering its subscription
``s0`` to the endpoint double; then the load stopped, every acknowledged message awaited at
the endpoint and read back from the storage, and the run judged by the checker::

    async with delivering(cluster, unique, tmp_path, session_s=6) as run:
        fault_at = time.time()
        ...  # the fault, and its heal
        verdict = await run.settle(heal_at=healed)  # 0 processes exited, every acked stored
    verdict.assert_sound(back_within_s=15)

(:func:`~tests.chaos.faults.publish_through` is the same without a worker: the storage's
order stands for the deliveries'.)
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from metastore import paths
from segments.config import KafkaClusterConfig
from tests.chaos.checker import Verdict, check, from_requests, longest_gap
from tests.chaos.conftest import Cluster
from tests.chaos.faults import ADMIN, Load
from tests.support.processes import ProducerProcess, WorkerProcess
from tests.support.services import RealServices
from tests.support.stored import read_to_end
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

GROUPS = 8  # publishing clients, one per group


@dataclass
class Delivering:
    world: ProcessWorld
    load: Load
    worker: WorkerProcess
    producer: ProducerProcess
    clients: list[asyncio.Task[None]]

    async def stop_load(self) -> None:
        self.load.stop.set()
        await asyncio.gather(*self.clients, return_exceptions=True)

    def gaps(self, since: float) -> tuple[float, float]:
        """The longest time without a 201 and without a delivery, from ``since`` on."""
        ok = [at for at, status in self.load.answers if status == 201]
        delivered = [r.at for r in self.world.hook.on("s0") if 200 <= r.status < 300]
        return longest_gap(ok, since), longest_gap(delivered, since)

    def exited(self) -> dict[str, int]:
        """The processes under test that exited, with their exit codes (none should)."""
        procs = {"worker": self.worker.proc, "producer": self.producer.proc}
        codes = {name: proc.poll() if proc else -1 for name, proc in procs.items()}
        return {name: code for name, code in codes.items() if code is not None}

    async def settle(self, heal_at: float, deadline_s: float = 90) -> Verdict:
        """The load stopped; no process under test exited; every acknowledged message
        delivered (within ``deadline_s``) and stored; the checker's verdict, recovery
        measured from ``heal_at``."""
        exited = self.exited()
        await self.stop_load()
        assert not exited, f"processes under test exited: {exited}"
        acked = {(g, str(s)) for g, seqs in self.load.acked.items() for s in seqs}
        ids = {f"{g}-{s}" for g, s in acked}
        hook, world = self.world.hook, self.world
        await until(lambda: ids <= set(hook.ids("s0")), deadline_s, "every acked delivered")
        stored = await read_to_end(world.store, world.storage, deadline_s=deadline_s)
        stored_pairs = {tuple(m.value.decode().split(":")) for m in stored}
        assert not acked - stored_pairs, "acknowledged and not stored"
        return check(self.load.history(from_requests(hook.on("s0"))), heal_at=heal_at)


async def _worker_holding(world: ProcessWorld, member: str) -> WorkerProcess:
    await world.meta.create(paths.assignment(member), json.dumps(["shop/s0"]).encode())
    [worker] = world.workers([member], commit_every_s=0.2, lock_retry_s=0.2)
    await worker.ready()

    async def holds() -> bool:
        return await world.holder("s0") == member

    await until(holds, 30, "the worker holding s0")
    return worker


@asynccontextmanager
async def delivering(
    cluster: Cluster,
    unique: str,
    tmp_path: Path,
    session_s: float,
    kafka: KafkaClusterConfig | None = None,
) -> AsyncIterator[Delivering]:
    """The load under way and deliveries flowing (ZooKeeper sessions of ``session_s``; the
    storage topic on ``kafka``, by default the cluster's with replication 1); the load
    stopped, the processes and the world torn down on the way out."""
    on_cluster = RealServices(cluster.zookeeper, cluster.kafka, pulsar="", pulsar_admin="")
    async with process_world(
        on_cluster, unique, tmp_path, grouped=True, session_timeout_s=session_s, kafka=kafka
    ) as world:
        await world.subscribe("s0", max_in_flight=8)
        worker = await _worker_holding(world, f"w-{unique}")
        with ProducerProcess(world.settings(admin_token=ADMIN), tmp_path) as producer:
            load = Load(producer.url)
            clients = [asyncio.create_task(load.group(f"g{i:02d}")) for i in range(GROUPS)]
            run = Delivering(world, load, worker, producer, clients)
            try:
                await until(lambda: len(world.hook.on("s0")) >= 50, 30, "deliveries flowing")
                yield run
            finally:
                await run.stop_load()

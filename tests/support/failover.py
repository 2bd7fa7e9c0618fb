"""The failover world of issue 20's integration tests: a Kafka broker of the test's own
(:class:`tests.support.dedicated.DedicatedKafka`; the test stops and kills it) as
``kafka-main``, the shared Pulsar as the standby ``pulsar-main``, the shared ZooKeeper (a
root of its own), three producer processes, the control plane in-process (its leader
detects and fails over), a worker process (:class:`Workers` starts it again if it dies,
and counts it) and the endpoint double; and :class:`Load`, groups that each publish their
sequence numbers one after the other, recording every publish's timing and outcome.

The worker runs as a process because librdkafka may abort the process whose AdminClient
requests (offset commits, group offsets) were left waiting on a frozen broker, when the
broker wakes (``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``, seen
here), or leave its admin requests unanswered for good; a crash restarts it from its
committed positions, as in production, and a test may restart a stuck one
(:meth:`Workers.restart`, counted and printed)."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from control_plane.settings import ControlPlaneSettings
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import AuditConfig, KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import SegmentStore
from segments.registry import open_store
from tests.support.dedicated import DedicatedKafka
from tests.support.delivery import (
    close_within,
    control_plane,
    drop_storage_topic,
    drop_topics,
    subscribe_hook,
    wipe,
)
from tests.support.hook import Hook, serve_hook
from tests.support.processes import ProducerProcess, WorkerProcess
from tests.support.services import RealServices

ADMIN = "integration-failover-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}
PRODUCE_TIMEOUT_S = 5.0


class Workers:
    """One worker process, started again whenever it dies (``crashes`` counts it)."""

    def __init__(self, settings: dict[str, Any], workdir: Path, member: str) -> None:
        self.settings, self.workdir, self.member = settings, workdir, member
        self.crashes: list[str] = []
        self.process = WorkerProcess(settings, workdir, member)
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.process.ready()
        self._task = asyncio.create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            if self.process.proc.poll() is not None:
                code = self.process.proc.returncode
                if code not in (0, -15):  # not a restart of ours
                    tail = self.process.log.read_text(errors="replace")[-600:]
                    self.crashes.append(f"exit {code}: {tail}")
                    print(f"\nworker died (exit {code}); started again")
                # A new member id: the dead one's membership lasts until its session expires.
                member = f"{self.member}-{len(self.crashes)}"
                self.process = WorkerProcess(self.settings, self.workdir, member)
                with contextlib.suppress(RuntimeError):  # exited at once: the next round
                    await self.process.ready()

    async def restart(self, why: str) -> None:
        """Stop and start the worker (a stuck one: see the module doc); counted."""
        self.crashes.append(f"restarted: {why}")
        print(f"\nworker restarted: {why}")
        self.process.stop()  # the watch starts the next one

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self.process.stop()


@dataclass
class FailoverWorld:
    kafka: DedicatedKafka
    cp: httpx.AsyncClient
    producers: list[httpx.AsyncClient]
    hook: Hook
    catalog: Catalog
    stores: dict[str, SegmentStore]
    workers: Workers

    async def topic(self, name: str, mode: str, partitions: int = 2) -> None:
        body = {
            "name": name,
            "partitions": partitions,
            "cluster": "kafka-main",
            "grouped": True,
            "failover": {"clusters": ["pulsar-main"], "mode": mode},
            "capacity": {"max_qps": 1_000_000, "max_bytes_per_second": 1024**3},
        }
        r = await self.cp.post("/v1/projects/shop/topics", json=body)
        assert r.status_code == 201, r.text

    async def subscribe(self, name: str, topic: str) -> None:
        await subscribe_hook(self.cp, self.hook, name, topic)


@asynccontextmanager
async def failover_world(
    real: RealServices, unique: str, tmp_path: Path, **failover: Any
) -> AsyncIterator[FailoverWorld]:
    """Everything above, torn down on exit (topics, the ZooKeeper root, the broker).
    ``failover``: control plane settings (``failover_latency_p99_ms=…``, say)."""
    kafka = DedicatedKafka(tmp_path / "kafka")
    kafka.start()  # in this thread: see DedicatedKafka.start
    root = f"/failover-{unique}"
    zk = ZooKeeperConfig(hosts=real.zookeeper, root=root)
    clusters = {
        "kafka-main": KafkaClusterConfig(
            bootstrap_servers=kafka.bootstrap, produce_timeout_s=PRODUCE_TIMEOUT_S
        ),
        "pulsar-main": PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin),
    }
    settings = ControlPlaneSettings(
        admin_token=ADMIN,
        metastore=zk,
        clusters=clusters,
        default_cluster="kafka-main",
        storage_topic_prefix=f"it-{unique}",
        assign_interval_s=0.3,
        audit=AuditConfig(cluster="pulsar-main", topic=f"it-{unique}.audit", partitions=1),
        database_url=f"sqlite:///{tmp_path / 'reports.db'}",
        trace_index=False,
        **failover,
    )
    producer_settings = {
        "admin_token": ADMIN,
        "metastore": {"kind": "zookeeper", "hosts": real.zookeeper, "root": root},
        "clusters": {name: c.model_dump() for name, c in clusters.items()},
    }
    stack = AsyncExitStack()
    stack.callback(kafka.stop)
    try:
        hook = await stack.enter_async_context(serve_hook())
        cp_meta = await stack.enter_async_context(open_metastore(zk))
        stack.push_async_callback(wipe, cp_meta)
        stores = {n: await stack.enter_async_context(open_store(c)) for n, c in clusters.items()}
        stack.push_async_callback(drop_storage_topic, stores["pulsar-main"], settings.audit.topic)
        _, cp = await control_plane(stack, settings, cp_meta, stores, AUTH)
        producers = []
        for _ in range(3):
            proc = stack.enter_context(ProducerProcess(producer_settings, tmp_path))
            producers.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=proc.url, headers=AUTH, timeout=30)
                )
            )
        worker_settings = {
            **producer_settings,
            "endpoint_policy": {"allow_private_networks": True},
            "commit_every_s": 0.2,
            "lock_retry_s": 0.1,
            "status_interval_s": 0.5,
        }
        del worker_settings["admin_token"]
        workers = Workers(worker_settings, tmp_path, f"w-{unique}")
        stack.push_async_callback(workers.aclose)
        await workers.start()
        yield FailoverWorld(kafka, cp, producers, hook, Catalog(cp_meta), stores, workers)
        await drop_topics(cp)
    finally:
        await close_within(stack, 120)


@dataclass(frozen=True)
class Publish:
    group: str
    seq: int
    start: float  # time.time()
    end: float
    status: int  # 0: no answer (the connection failed)
    segment: int | None = None

    @property
    def ms(self) -> float:
        return 1000 * (self.end - self.start)


@dataclass
class Load:
    """``groups`` groups; each publishes its next sequence number once the previous one was
    acknowledged (the same message id again after a failure), through the producers in
    turn, about ``per_group_s`` apart."""

    producers: list[httpx.AsyncClient]
    topic: str
    groups: int = 200
    per_group_s: float = 1.0
    acked: dict[str, list[int]] = field(default_factory=dict)
    publishes: list[Publish] = field(default_factory=list)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self) -> None:
        self.acked = {f"g{i:03d}": [] for i in range(self.groups)}
        await asyncio.gather(*(self._group(i, g) for i, g in enumerate(self.acked)))

    async def _group(self, index: int, group: str) -> None:
        await asyncio.sleep(self.per_group_s * index / self.groups)  # spread the groups
        seq = 0
        while not self.stop.is_set():
            client = self.producers[(index + seq) % len(self.producers)]
            headers = {"X-Group-Id": group, "X-Message-Id": f"{group}-{seq:06d}"}
            start = time.time()
            try:
                r = await client.post(
                    f"/v1/projects/shop/topics/{self.topic}/produce",
                    content=f"{group}:{seq}".encode(),
                    headers=headers,
                )
                status, segment = r.status_code, (r.json().get("segment") if r.is_success else None)
            except httpx.HTTPError:
                status, segment = 0, None
            self.publishes.append(Publish(group, seq, start, time.time(), status, segment))
            if 200 <= status < 300:
                self.acked[group].append(seq)
                seq += 1
                await asyncio.sleep(self.per_group_s)
            else:
                await asyncio.sleep(0.2)

    def on_segment(self, segment: int) -> list[Publish]:
        return [p for p in self.publishes if p.segment == segment]

    def total(self) -> int:
        return sum(map(len, self.acked.values()))

    def figures(self, outage_at: float, label: str) -> str:
        """The unavailability window around ``outage_at`` and the latency around it."""
        failed = [p for p in self.publishes if p.status >= 300 or p.status == 0]
        after = [p for p in self.publishes if p.segment is not None and p.segment > 1]
        first_failed = min((p.start for p in failed if p.end >= outage_at), default=None)
        first_ok = min((p.end for p in after), default=None)
        lines = [f"\n{label}: {self.total()} acknowledged, {len(failed)} failed publishes"]
        if first_failed is not None and first_ok is not None:
            lines.append(
                f"  unavailability window (first failed publish began → first 2xx on the new "
                f"segment): {first_ok - first_failed:.2f}s; outage → first 2xx there: "
                f"{first_ok - outage_at:.2f}s"
            )
        for name, lo, hi in (
            ("10 s before the outage", outage_at - 10, outage_at),
            ("the 20 s after it began", outage_at, outage_at + 20),
            ("20-60 s after it", outage_at + 20, outage_at + 60),
        ):
            ms = sorted(p.ms for p in self.publishes if lo <= p.start < hi and p.status // 100 == 2)
            if ms:
                lines.append(
                    f"  publish latency of the 2xx, {name}: n={len(ms)} "
                    f"p50={statistics.median(ms):.0f} ms "
                    f"p99={ms[min(len(ms) - 1, int(0.99 * len(ms)))]:.0f} ms"
                )
        return "\n".join(lines)


def first_seen(ids: list[str]) -> list[int]:
    """Sequence numbers in the order of their first delivery (duplicates dropped)."""
    seen: set[int] = set()
    out = []
    for mid in ids:
        seq = int(mid.rsplit("-", 1)[1])
        if seq not in seen:
            seen.add(seq)
            out.append(seq)
    return out

"""Worlds with delivery workers. :func:`workers_world`: the assignment tests'
:func:`~tests.support.world.embedded_world` with an Assigner in the test process and
in-process Workers, each on a metastore session of its own (its own connection to the one
metastore file) and its own sender. :func:`process_world`: a topic on the real ZooKeeper and
Kafka for worker processes, which a test may SIGKILL.

    async with workers_world(tmp_path) as world:
        await world.subscribe("s0")
        w1 = await world.worker("w1")
        await until(lambda: "p/s0" in w1.runners, what="s0 running on w1")
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from fastapi import FastAPI

from control_plane.app import create_app
from control_plane.leaders.assigner import Assigner
from control_plane.settings import ControlPlaneSettings
from core.model import Endpoint, Project, Subscription, Topic
from delivery_workers.http_sender import HttpSender
from delivery_workers.worker import Worker
from metastore import paths
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from metastore.embedded import EmbeddedMetaStore
from metastore.protocol import MetaStore
from segments.audit import AuditSink
from segments.config import KafkaClusterConfig
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from tests.support.hook import SECRET, Hook, serve_hook
from tests.support.processes import WorkerProcess
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import World, embedded_world, segment, subscription

if TYPE_CHECKING:
    from scripts.realservices.netns import Namespace


@dataclass
class WorkersWorld:
    file: str  # the metastore's SQLite file
    world: World
    stack: list[tuple[Worker, EmbeddedMetaStore, HttpSender]] = field(default_factory=list)

    @property
    def catalog(self) -> Catalog:
        return self.world.catalog

    @property
    def store(self) -> SegmentStore:
        return self.world.store

    @property
    def hook(self) -> Hook:
        return self.world.hook

    async def rotate_secret(self, worker: Worker, sub: str, secret: str, overlap_s: float) -> float:
        """Subscription ``p/<sub>`` rotated to ``secret``, the old one retiring after
        ``overlap_s``, once ``worker``'s runner of it signs with ``secret``: when the old one
        retires (epoch seconds)."""
        current = await self.catalog.get_subscription("p", sub)
        rotated = await self.catalog.update_subscription(
            current.rotated(secret, datetime.now(UTC), overlap_s)
        )
        [ends] = [r.until.timestamp() for r in rotated.retiring_secrets]

        def picked_up() -> bool:
            runner = worker.runners.get(f"p/{sub}")
            return runner is not None and runner.sub.signing_secret == secret

        await until(picked_up, what=f"the worker's runner of {sub} on the new secret")
        return ends

    async def worker(self, member: str, audit: Any = None, **options: Any) -> Worker:
        """A started Worker named ``member`` (writing its audit events to ``audit``: an
        ``AuditSink`` or a ``MemoryAudit``; more ``Worker`` arguments in ``options``),
        stopped with the world (or :meth:`stop`)."""
        meta = EmbeddedMetaStore(self.file)
        await meta.start()
        sender = HttpSender()
        await sender.start()
        worker = Worker(
            meta,
            self.world.stores,
            sender,
            member,
            audit=audit,
            commit_every_s=0.1,
            lock_retry_s=0.1,
            **options,
        )
        await worker.start()
        self.stack.append((worker, meta, sender))
        return worker

    async def stop(self, worker: Worker) -> None:
        for entry in self.stack:
            if entry[0] is worker:
                self.stack.remove(entry)
                await worker.aclose()
                await entry[1].aclose()
                await entry[2].aclose()
                return

    async def subscribe(self, name: str, **fields: object) -> None:
        """Subscription ``name``, pushing to the hook's path ``name``."""
        sub = subscription(name, self.hook.url_for(name), **fields)
        await self.catalog.create_subscription(sub)

    async def produce(self, prefix: str, count: int) -> list[str]:
        """``count`` ungrouped messages ``<prefix>-<i>`` on segment 1."""
        ids = [f"{prefix}-{i}" for i in range(count)]
        for mid in ids:
            headers = (("x-message-id", mid.encode()),)
            await self.store.produce("st.1", Record(mid.encode(), key=None, headers=headers))
        return ids


@asynccontextmanager
async def workers_world(tmp_path: Path) -> AsyncIterator[WorkersWorld]:
    """Topic ``p/t`` (ungrouped, 3 partitions) with an Assigner; every worker stopped after."""
    async with embedded_world(tmp_path, partitions=3, grouped=False) as world:
        built = WorkersWorld(str(tmp_path / "meta.db"), world)
        async with Assigner(world.meta, world.catalog, "cp-1", interval_s=0.5):
            try:
                yield built
            finally:
                for worker, *_ in list(built.stack):
                    await built.stop(worker)


@pytest.fixture(name="world")
async def workers_world_fixture(tmp_path: Path) -> AsyncIterator[WorkersWorld]:
    """The ``world`` fixture of the assignment tests: ``from … import workers_world_fixture``."""
    async with workers_world(tmp_path) as built:
        yield built


@dataclass
class ProcessWorld:
    """Topic ``shop/orders`` on the real ZooKeeper (a root of its own) and Kafka, the endpoint
    double, and the delivery workers as processes (:class:`WorkerProcess`), for the tests
    that kill one."""

    zk: ZooKeeperConfig
    kafka: KafkaClusterConfig
    meta: MetaStore
    catalog: Catalog
    store: SegmentStore
    storage: str
    hook: Hook
    workdir: Path
    processes: list[WorkerProcess] = field(default_factory=list)

    def settings(self, **extra: object) -> dict[str, Any]:
        """A process's settings: this world's metastore and cluster, and ``extra``."""
        clusters = {"kafka-main": self.kafka.model_dump()}
        return {"metastore": self.zk.model_dump(), "clusters": clusters, **extra}

    def control_plane_app(self, token: str, **more: Any) -> FastAPI:
        """The control plane on this world's metastore and Kafka (no trace index), with
        ``token`` as its admin token and ``more`` settings; not started."""
        settings = ControlPlaneSettings(
            admin_token=token,
            metastore=self.zk,
            clusters={"kafka-main": self.kafka},
            default_cluster="kafka-main",
            trace_index=False,
            **more,
        )
        return create_app(settings, metastore=self.meta, stores={"kafka-main": self.store})

    async def subscribe(self, name: str, path: str | None = None, **fields: object) -> None:
        """Subscription ``shop/name``, pushing to the hook's path ``path`` (default ``name``)."""
        endpoint = Endpoint(url=self.hook.url_for(path or name))
        sub = Subscription(
            project="shop",
            name=name,
            topic_project="shop",
            topic="orders",
            endpoint=endpoint,
            signing_secret=SECRET,
            **fields,
        )  # type: ignore[arg-type]
        await self.catalog.create_subscription(sub)

    def metastore(self, **changes: object) -> dict[str, Any]:
        """This world's metastore settings with ``changes`` (a longer session, say)."""
        return {**self.zk.model_dump(), **changes}

    async def assign(self, member: str, *subs: str) -> None:
        """Member ``member`` assigned ``subs`` of project ``shop`` directly, with no Assigner."""
        keys = [f"shop/{s}" for s in subs]
        await self.meta.create(paths.assignment(member), json.dumps(keys).encode())

    def worker(
        self, member: str, settings: dict[str, Any], ns: Namespace | None = None
    ) -> WorkerProcess:
        """A worker process ``member`` with exactly ``settings``, in network namespace ``ns``
        if given, stopped with the world."""
        inside = (ns.exec_argv, ns.address) if ns else ()
        started = WorkerProcess(settings, self.workdir, member, *inside)
        self.processes.append(started)
        return started

    def workers(self, members: list[str], **settings: object) -> list[WorkerProcess]:
        """A worker process per member, with :meth:`settings` and ``settings``; all stopped
        with the world."""
        return [self.worker(m, self.settings(**settings)) for m in members]

    async def holder(self, sub: str, shard: int | None = None) -> str | None:
        """The member holding the lock of ``shop/sub`` (or of its shard ``shard``)."""
        node = await self.meta.get(paths.subscription_lock("shop", sub, shard))
        return None if node is None else str(json.loads(node.data)["member"])

    async def held(self, subs: list[str]) -> dict[str, str]:
        """The member holding each of ``subs`` that is held."""
        members = {sub: await self.holder(sub) for sub in subs}
        return {sub: m for sub, m in members.items() if m is not None}

    async def all_held(self, subs: list[str], timeout: float = 30) -> dict[str, str]:
        """The member holding each of ``subs``, once every one is held."""

        async def every() -> dict[str, str] | None:
            members = await self.held(subs)
            return members if len(members) == len(subs) else None

        return await until(every, timeout, f"{subs} held", interval=0.1)

    async def produce_many(self, records: list[Record]) -> None:
        results = await self.store.produce_many(self.storage, records)
        assert not [r for r in results if isinstance(r, Exception)]


@asynccontextmanager
async def process_world(
    real: RealServices,
    unique: str,
    workdir: Path,
    *,
    grouped: bool = False,
    session_timeout_s: float | None = 4.0,
    kafka: KafkaClusterConfig | None = None,
) -> AsyncIterator[ProcessWorld]:
    """Project ``shop`` with topic ``orders`` (4 partitions) on Kafka (``real``'s, or
    ``kafka``: a cluster's settings such as its replication; ``session_timeout_s`` None:
    ZooKeeper's default session); the hook takes 2 ms per
    answer (a real endpoint takes a moment, so a load lasts a while). On exit the worker
    processes stop and the ZooKeeper root and the storage topic are deleted."""
    session = {} if session_timeout_s is None else {"session_timeout_s": session_timeout_s}
    zk = ZooKeeperConfig(hosts=real.zookeeper, root=f"/workers-{unique}", **session)
    kafka = kafka or KafkaClusterConfig(bootstrap_servers=real.kafka)
    storage = f"it.{unique}.orders.s1"
    async with (
        open_metastore(zk) as meta,
        open_store(kafka) as store,
        serve_hook(delay=lambda path: 0.002) as hook,
    ):
        catalog = Catalog(meta)
        world = ProcessWorld(zk, kafka, meta, catalog, store, storage, hook, workdir)
        try:
            await catalog.create_project(Project(name="shop"))
            await store.create_topic(storage, 4, retention_ms=3_600_000)
            first = segment("kafka-main", storage=storage, partitions=4)
            await catalog.create_topic(Topic(project="shop", name="orders", grouped=grouped), first)
            yield world
        finally:
            for process in world.processes:
                process.stop()
            for child in await meta.children("/"):
                await meta.delete(f"/{child}", recursive=True)
            await store.delete_topic(storage)


@asynccontextmanager
async def in_process_worker(
    world: ProcessWorld, member: str, subs: list[str], audit: AuditSink | None = None
) -> AsyncIterator[Worker]:
    """A Worker in the test process on the world's metastore session, assigned ``subs`` (of
    project ``shop``) directly, with no Assigner."""
    async with (
        HttpSender() as sender,
        Worker(
            world.meta,
            {"kafka-main": world.store},
            sender,
            member,
            audit=audit,
            commit_every_s=0.5,
            lock_retry_s=0.2,
        ) as worker,
    ):
        await world.assign(member, *subs)
        yield worker


@asynccontextmanager
async def worker_in_process(
    meta: MetaStore, stores: dict[str, SegmentStore], member: str, **options: Any
) -> AsyncIterator[Worker]:
    """A started Worker (and its sender) in the test process on ``meta``; the assignment is
    the Assigner's (or the test's) to give."""
    async with HttpSender() as sender, Worker(meta, stores, sender, member, **options) as worker:
        yield worker

"""A delivery setup on the real servers for the integration tests: ZooKeeper (a root of its
own), one storage cluster (Kafka or Pulsar), the producer service as a process, the control
plane in-process (its own ZooKeeper session, its Assigner), a Worker in-process on another
session, and the endpoint double (:mod:`tests.support.hook`), whose answer time a test can set."""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.errors import HttpbusError
from delivery_workers.http_sender import HttpSender
from delivery_workers.worker import Worker
from metastore.config import ZooKeeperConfig, open_metastore
from segments.audit import open_audit
from segments.config import AuditConfig, ClusterConfig, KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import SegmentStore
from segments.registry import open_store
from tests.support.hook import SECRET, Hook, serve_hook
from tests.support.processes import ProducerProcess
from tests.support.services import RealServices
from tests.support.until import until

ADMIN = "integration-delivery-admin-token"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@dataclass
class DeliveryWorld:
    cluster: str
    cp: httpx.AsyncClient
    producer: httpx.AsyncClient
    hook: Hook
    worker: Worker
    app: Any = None  # the control plane's ASGI app (``serve_app`` puts it on a port)

    async def topic(self, name: str, partitions: int = 4, **fields: Any) -> dict[str, Any]:
        body = {"name": name, "partitions": partitions, "cluster": self.cluster, **fields}
        body.setdefault("capacity", {"max_qps": 1_000_000, "max_bytes_per_second": 1024**3})
        r = await self.cp.post("/v1/projects/shop/topics", json=body)
        assert r.status_code == 201, r.text
        topic: dict[str, Any] = r.json()
        return topic

    async def subscribe(self, name: str, topic: str, **fields: Any) -> None:
        await subscribe_hook(self.cp, self.hook, name, topic, **fields)

    async def notices_to_hook(self, **fields: Any) -> tuple[dict[str, Any], str]:
        """Project shop sends its notices to the endpoint double's path ``notify`` (``fields``
        update more of the project, ``notifications`` say); the project as the API answered,
        and its notification secret (shown once, at creation: read back from the catalog)."""
        project = (await self.cp.get("/v1/projects/shop")).json()
        url = self.hook.url_for("notify")
        body = {"notification_url": url, **fields, "version": project["version"]}
        r = await self.cp.put("/v1/projects/shop", json=body)
        assert r.status_code == 200, r.text
        secret = (await self.worker.catalog.get_project("shop")).notification_secret
        assert secret is not None
        return r.json(), secret

    async def running(self, name: str, timeout: float = 30) -> None:
        await until(lambda: f"shop/{name}" in self.worker.runners, timeout, f"{name} running")

    async def produce(self, topic: str, body: bytes, headers: dict[str, str]) -> float:
        """Produce one message; the time it was accepted (time.time())."""
        r = await self.producer.post(
            f"/v1/projects/shop/topics/{topic}/produce", content=body, headers=headers
        )
        assert r.status_code in (200, 201, 202), r.text
        return time.time()


async def subscribe_hook(
    cp: httpx.AsyncClient, hook: Hook, name: str, topic: str, **fields: Any
) -> None:
    """Subscription ``name`` of project shop on ``topic``, delivering to the endpoint double."""
    body = {
        "name": name,
        "topic": topic,
        "endpoint": {"url": hook.url_for(name)},
        "signing_secret": SECRET,
        **fields,
    }
    r = await cp.post("/v1/projects/shop/subscriptions", json=body)
    assert r.status_code == 201, r.text


def clusters(real: RealServices) -> dict[str, ClusterConfig]:
    return {
        "kafka-main": KafkaClusterConfig(bootstrap_servers=real.kafka),
        "pulsar-main": PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin),
    }


@asynccontextmanager
async def delivery_world(
    real: RealServices,
    unique: str,
    tmp_path: Path,
    cluster: str,
    *,
    database_url: str | None = None,
    cluster_config: ClusterConfig | None = None,
    extra_clusters: dict[str, ClusterConfig] | None = None,
    audit_cluster: str | None = None,
    cp_settings: dict[str, Any] | None = None,
    **worker_options: Any,
) -> AsyncIterator[DeliveryWorld]:
    """Everything above, torn down (and the ZooKeeper root deleted) on exit. With a
    ``database_url`` the producer and the worker also write an audit trail (a topic of this
    world on its cluster) and the control plane keeps its reports and trace index there.
    ``cluster_config`` replaces the standard config of ``cluster`` (a read_only one, say);
    ``extra_clusters`` are configured beside it everywhere (a cutover's target, say);
    ``audit_cluster`` (one of them) holds the audit trail instead of ``cluster``;
    ``cp_settings`` are more settings of the control plane (its ``archive``, say)."""
    root = f"/delivery-{unique}"
    zk = ZooKeeperConfig(hosts=real.zookeeper, root=root)
    configured = clusters(real)
    if cluster_config is not None:
        configured[cluster] = cluster_config
    used = {cluster: configured[cluster], **(extra_clusters or {})}
    audit_on = audit_cluster or cluster
    audit = AuditConfig(cluster=audit_on, topic=f"it-{unique}.audit", partitions=2)
    reports = {"database_url": database_url, "audit": audit} if database_url else {}
    settings = ControlPlaneSettings(
        admin_token=ADMIN,
        metastore=zk,
        clusters=used,
        default_cluster=cluster,
        storage_topic_prefix=f"it-{unique}",
        assign_interval_s=0.3,
        **reports,
        **(cp_settings or {}),
    )
    producer_settings = {
        "admin_token": ADMIN,
        "metastore": {"kind": "zookeeper", "hosts": real.zookeeper, "root": root},
        "clusters": {name: config.model_dump() for name, config in used.items()},
    }
    if database_url:
        producer_settings["audit"] = audit.model_dump()
    stack = AsyncExitStack()
    try:
        hook = await stack.enter_async_context(serve_hook())
        cp_meta = await stack.enter_async_context(open_metastore(zk))
        stack.push_async_callback(wipe, cp_meta)
        store = await stack.enter_async_context(open_store(configured[cluster]))
        cp_stores = {cluster: store}
        for name, config in (extra_clusters or {}).items():
            cp_stores[name] = await stack.enter_async_context(open_store(config))
        if database_url:
            stack.push_async_callback(drop_storage_topic, cp_stores[audit_on], audit.topic)
        app, cp = await control_plane(stack, settings, cp_meta, cp_stores, AUTH)
        producer = stack.enter_context(ProducerProcess(producer_settings, tmp_path))
        producer_client = await stack.enter_async_context(
            httpx.AsyncClient(base_url=producer.url, headers=AUTH, timeout=30)
        )
        worker_meta = await stack.enter_async_context(open_metastore(zk))
        worker_store = await stack.enter_async_context(open_store(configured[cluster]))
        worker_stores = {cluster: worker_store}
        for name, config in (extra_clusters or {}).items():
            worker_stores[name] = await stack.enter_async_context(open_store(config))
        sender = await stack.enter_async_context(HttpSender())  # the worker's default
        if database_url:
            worker_options["audit"] = await open_audit(stack, worker_stores, audit)
        options = {"commit_every_s": 0.2, "lock_retry_s": 0.1, "status_interval_s": 0.5}
        worker = Worker(
            worker_meta,
            worker_stores,
            sender,
            f"w-{unique}",
            **{**options, **worker_options},
        )
        await stack.enter_async_context(worker)
        yield DeliveryWorld(cluster, cp, producer_client, hook, worker, app)
        await drop_topics(cp)
    finally:
        await close_within(stack, 90)


@pytest.fixture(name="world")
async def notifying_world_fixture(
    real_services: RealServices, unique: str, tmp_path: Path
) -> AsyncIterator[DeliveryWorld]:
    """A Kafka world whose worker retries a project's notices within a second (the
    notification tests): ``from … import notifying_world_fixture``."""
    async with delivery_world(
        real_services, unique, tmp_path, "kafka-main", notify_backoff_s=(0.2, 0.5)
    ) as built:
        yield built


@pytest.fixture(name="world")
async def audited_world_fixture(
    real_services: RealServices, unique: str, tmp_path: Path, postgres_database: str
) -> AsyncIterator[DeliveryWorld]:
    """A Kafka world with an audit trail, its reports and trace index in a PostgreSQL
    database of the test's own: ``from … import audited_world_fixture``."""
    async with delivery_world(
        real_services, unique, tmp_path, "kafka-main", database_url=postgres_database
    ) as built:
        yield built


async def control_plane(
    stack: AsyncExitStack,
    settings: Any,
    metastore: Any,
    stores: dict[str, Any],
    auth: dict[str, str],
) -> tuple[Any, httpx.AsyncClient]:
    """The control plane app in this process, started on ``stack``, and an admin client of
    it (no port: ``serve_app`` gives one) in which project ``shop`` exists."""
    app = create_app(settings, metastore=metastore, stores=stores)
    await stack.enter_async_context(app.router.lifespan_context(app))
    cp = await stack.enter_async_context(
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://cp", headers=auth
        )
    )
    r = await cp.post("/v1/projects", json={"name": "shop"})
    assert r.status_code == 201, r.text
    return app, cp


async def close_within(stack: AsyncExitStack, timeout: float) -> None:
    """Close ``stack``, failing with every task's state if that takes over ``timeout`` s."""
    try:
        async with asyncio.timeout(timeout):
            await stack.aclose()
    except TimeoutError:
        tasks = "\n".join(repr(t) for t in asyncio.all_tasks())
        raise AssertionError(f"teardown hung; tasks:\n{tasks}") from None


async def drop_storage_topic(store: SegmentStore, topic: str) -> None:
    with contextlib.suppress(HttpbusError):
        await store.delete_topic(topic)


async def drop_topics(cp: httpx.AsyncClient) -> None:
    r = await cp.get("/v1/projects/shop/topics", params={"limit": 500})
    for name in [t["name"] for t in r.json().get("items", [])]:
        await cp.delete(f"/v1/projects/shop/topics/{name}", params={"force": "true"})


async def wipe(meta: Any) -> None:
    for child in await meta.children("/"):
        await meta.delete(f"/{child}", recursive=True)


def jitter(low: float, high: float) -> Callable[[str], float]:
    rng = random.Random(7)
    return lambda path: rng.uniform(low, high)

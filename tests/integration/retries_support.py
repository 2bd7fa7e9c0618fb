"""What the retries, DLQ and delays integration tests share: a real ZooKeeper metastore, a
real Kafka or Pulsar store with one grouped topic, a local endpoint that records arrival times,
and a :class:`SubscriptionRunner` run in the test process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest
from aiohttp import web

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.model import (
    Backend,
    CircuitBreakerPolicy,
    Endpoint,
    Project,
    Segment,
    SegmentState,
    Subscription,
    Topic,
)
from delivery_workers.commit import CommitPolicy
from delivery_workers.fast_sender import FastSender
from delivery_workers.runner import SubscriptionRunner
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from metastore.protocol import MetaStore
from segments.config import ClusterConfig, KafkaClusterConfig, PulsarClusterConfig
from segments.protocol import Record, SegmentStore
from segments.reader import SegmentReader
from segments.registry import open_store
from segments.subscription.layout import drop_layout
from tests.conftest import RealServices

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BACKENDS = [
    pytest.param("kafka", marks=[pytest.mark.kafka, pytest.mark.zookeeper], id="kafka"),
    pytest.param("pulsar", marks=[pytest.mark.pulsar, pytest.mark.zookeeper], id="pulsar"),
]
Behaviour = Callable[[str, int], tuple[int, dict[str, str]]]


@dataclass
class Hook:
    """The endpoint: ``behaviour(message id, attempt seen here)`` answers each request."""

    url: str = ""
    behaviour: Behaviour = lambda mid, n: (204, {})
    got: list[tuple[str, str, float, int]] = field(default_factory=list)  # group, id, t, attempt
    tries: dict[str, list[float]] = field(default_factory=dict)

    def delivered(self) -> list[str]:
        return [mid for _, mid, _, _ in self.got]

    def of_group(self, group: str) -> list[str]:
        return [mid for g, mid, _, _ in self.got if g == group]

    def arrival(self, mid: str) -> float:
        return next(t for _, m, t, _ in self.got if m == mid)


@asynccontextmanager
async def hook_server() -> AsyncIterator[Hook]:
    hook = Hook()

    async def handle(request: web.Request) -> web.Response:
        mid = request.headers["X-Message-Id"]
        hook.tries.setdefault(mid, []).append(time.time())
        status, headers = hook.behaviour(mid, len(hook.tries[mid]))
        if 200 <= status < 300:
            group = request.headers.get("X-Group-Id", "")
            hook.got.append((group, mid, time.time(), int(request.headers["X-Attempt"])))
        return web.Response(status=status, headers=headers)

    app = web.Application()
    app.router.add_post("/hook", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    hook.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield hook
    finally:
        await runner.cleanup()


@dataclass
class RealWorld:
    kind: str
    cluster: str
    config: ClusterConfig
    zk: ZooKeeperConfig
    meta: MetaStore
    catalog: Catalog
    store: SegmentStore
    reader: SegmentReader
    storage: str
    hook: Hook
    subs: list[str] = field(default_factory=list)

    @property
    def stores(self) -> dict[str, SegmentStore]:
        return {self.cluster: self.store}


def cluster_config(kind: str, real: RealServices) -> ClusterConfig:
    if kind == "kafka":
        return KafkaClusterConfig(bootstrap_servers=real.kafka)
    return PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin)


@asynccontextmanager
async def real_world(
    kind: str, real: RealServices, unique: str, partitions: int = 2, grouped: bool = True
) -> AsyncIterator[RealWorld]:
    """A project ``p`` with a grouped topic ``t`` on ``kind``; everything is removed after."""
    zk = ZooKeeperConfig(hosts=real.zookeeper, root=f"/retries-{unique}", session_timeout_s=4.0)
    config = cluster_config(kind, real)
    cluster = f"{kind}-main"
    storage = f"it.{unique}.retries"
    async with (
        open_metastore(zk) as meta,
        open_store(config) as store,
        hook_server() as hook,
    ):
        catalog = Catalog(meta)
        world = RealWorld(
            kind,
            cluster,
            config,
            zk,
            meta,
            catalog,
            store,
            SegmentReader(catalog, {cluster: store}),
            storage,
            hook,
        )
        try:
            await catalog.create_project(Project(name="p"))
            await store.create_topic(storage, partitions, retention_ms=3_600_000)
            segment = Segment(
                id=1,
                cluster=cluster,
                backend=Backend(kind),
                storage_topic=storage,
                partitions=partitions,
                state=SegmentState.ACTIVE,
            )
            await catalog.create_topic(Topic(project="p", name="t", grouped=grouped), segment)
            yield world
        finally:
            for name in world.subs:
                await drop_layout(meta, world.stores, "p", name)
            await store.delete_topic(storage)
            for child in await meta.children("/"):
                await meta.delete(f"/{child}", recursive=True)


async def subscribe(world: RealWorld, name: str = "s", **fields: object) -> Subscription:
    # These tests measure the retry schedule against endpoints that fail most attempts; the
    # circuit breaker (on by default) would rightly slow such a subscription down to its probe
    # rate. test_circuit_breaker_kafka.py tests the two together.
    fields.setdefault("circuit_breaker", CircuitBreakerPolicy(enabled=False))
    sub = Subscription(
        project="p",
        name=name,
        topic_project="p",
        topic="t",
        endpoint=Endpoint(url=world.hook.url),
        signing_secret=SECRET,
        **fields,
    )  # type: ignore[arg-type]
    world.subs.append(name)
    return await world.catalog.create_subscription(sub)


def record(mid: str, group: str | None, **extra: bytes) -> Record:
    """A message as the producer service stores it (``group`` None: ungrouped)."""
    headers = (
        ("x-message-id", mid.encode()),
        *((("x-group-id", group.encode()),) if group is not None else ()),
        ("x-produced-at", str(int(time.time() * 1000)).encode()),
        *extra.items(),
    )
    return Record(mid.encode(), key=group.encode() if group else None, headers=headers)


async def produce(world: RealWorld, mid: str, group: str, **extra: bytes) -> str:
    await world.store.produce(world.storage, record(mid, group, **extra))
    return mid


class Running:
    """``async with Running(world, sub) as runner``: the subscription delivers meanwhile."""

    def __init__(self, world: RealWorld, sub: Subscription) -> None:
        self.world, self.sub = world, sub

    async def __aenter__(self) -> SubscriptionRunner:
        self.sender = FastSender()
        await self.sender.start()
        self.runner = SubscriptionRunner(
            self.sub,
            self.world.reader,
            self.sender,
            commit_policy=CommitPolicy(every_n=100, every_s=0.2),
        )
        self.task = asyncio.create_task(self.runner.run())
        return self.runner

    async def __aexit__(self, *exc: object) -> None:
        self.task.cancel()
        try:
            await self.task
        except asyncio.CancelledError:
            pass
        await self.sender.aclose()


async def until(condition: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.02)
    except TimeoutError:
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


TOKEN = "test-admin-token-0123456789"


@asynccontextmanager
async def control_plane(world: RealWorld) -> AsyncIterator[httpx.AsyncClient]:
    """The control plane's admin API in the test process, on the world's metastore and store."""
    settings = ControlPlaneSettings(
        admin_token=TOKEN,
        metastore=world.zk,
        clusters={world.cluster: world.config},
        default_cluster=world.cluster,
    )
    app = create_app(settings, metastore=world.meta, stores=world.stores)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport,
            base_url="http://cp/v1/projects/p/subscriptions",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=60,
        ) as client:
            yield client

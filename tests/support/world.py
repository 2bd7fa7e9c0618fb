"""The delivery world, one builder per backend: a metastore, a segment store with project ``p``
and its topic ``t`` on one segment, a :class:`~tests.support.hook.Hook` endpoint, and a
:class:`SubscriptionRunner` run in the test process (:class:`Running`).

    async with embedded_world(tmp_path) as world:          # SQLite files, for tests/unit
    async with kafka_world(real_services, unique) as world:  # real ZooKeeper + Kafka
    async with pulsar_world(real_services, unique) as world: # real ZooKeeper + Pulsar
        sub = await subscribe(world, retry=policy)
        await produce(world, "m-1", group="g1")
        async with Running(world, sub) as runner:
            await until(lambda: world.hook.delivered() == ["m-1"], what="m-1 delivered")

``real_world(kind, …)`` picks the builder by name ("kafka" or "pulsar"), for tests
parametrised over :data:`BACKENDS`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

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
from delivery_workers.http_sender import HttpSender
from delivery_workers.runner import SubscriptionRunner
from delivery_workers.tracking import CommitPolicy
from metastore.catalog import Catalog
from metastore.config import EmbeddedMetaStoreConfig, ZooKeeperConfig, open_metastore
from metastore.protocol import MetaStore
from segments.audit import AuditSink
from segments.config import (
    ClusterConfig,
    EmbeddedClusterConfig,
    KafkaClusterConfig,
    PulsarClusterConfig,
)
from segments.protocol import Record, SegmentStore
from segments.reader import SegmentReader
from segments.registry import open_store
from segments.subscription.layout import Layout, drop_layout, load_layout
from tests.support.hook import SECRET, Hook, serve_hook
from tests.support.services import RealServices
from tests.support.until import until

__all__ = [
    "BACKENDS",
    "SECRET",
    "TOKEN",
    "Running",
    "World",
    "control_plane",
    "embedded_world",
    "kafka_world",
    "produce",
    "pulsar_world",
    "real_world",
    "record",
    "segment",
    "subscribe",
]

BACKENDS = [
    pytest.param("kafka", marks=[pytest.mark.kafka, pytest.mark.zookeeper], id="kafka"),
    pytest.param("pulsar", marks=[pytest.mark.pulsar, pytest.mark.zookeeper], id="pulsar"),
]
HOUR_MS = 3_600_000
TOKEN = "test-admin-token-0123456789"


@dataclass
class World:
    kind: str  # "embedded", "kafka" or "pulsar"
    cluster: str
    config: ClusterConfig
    zk: ZooKeeperConfig | EmbeddedMetaStoreConfig  # the metastore's config
    meta: MetaStore
    catalog: Catalog
    store: SegmentStore
    reader: SegmentReader
    storage: str  # the storage topic of segment 1
    hook: Hook
    subs: list[str] = field(default_factory=list)

    @property
    def stores(self) -> dict[str, SegmentStore]:
        return {self.cluster: self.store}


def segment(
    world_or_cluster: World | str,
    segment_id: int = 1,
    state: SegmentState = SegmentState.ACTIVE,
    *,
    storage: str | None = None,
    partitions: int = 2,
) -> Segment:
    """Segment ``segment_id`` of the world's cluster (storage topic ``st.<id>`` by default)."""
    cluster = world_or_cluster if isinstance(world_or_cluster, str) else world_or_cluster.cluster
    kind = cluster.split("-")[0]
    return Segment(
        id=segment_id,
        cluster=cluster,
        backend=Backend(kind),
        storage_topic=storage or f"st.{segment_id}",
        partitions=partitions,
        state=state,
    )


async def catalog_with_t(meta: MetaStore, first: Segment | None = None) -> Catalog:
    """A catalog on ``meta`` holding project ``p`` and its topic ``t``, metadata only (no
    storage topic is made); ``first`` is the topic's first segment (by default one partition
    of storage topic ``s1`` on the embedded cluster)."""
    catalog = Catalog(meta)
    await catalog.create_project(Project(name="p"))
    first = first or segment("embedded", storage="s1", partitions=1)
    await catalog.create_topic(Topic(project="p", name="t"), first)
    return catalog


@asynccontextmanager
async def _world(
    kind: str,
    config: ClusterConfig,
    zk: ZooKeeperConfig | EmbeddedMetaStoreConfig,
    storage: str,
    partitions: int,
    grouped: bool,
) -> AsyncIterator[World]:
    cluster = "embedded" if kind == "embedded" else f"{kind}-main"
    async with open_metastore(zk) as meta, open_store(config) as store, serve_hook() as hook:
        catalog = Catalog(meta)
        reader = SegmentReader(catalog, {cluster: store})
        world = World(kind, cluster, config, zk, meta, catalog, store, reader, storage, hook)
        try:
            await catalog.create_project(Project(name="p"))
            await store.create_topic(storage, partitions, retention_ms=HOUR_MS)
            first = segment(cluster, storage=storage, partitions=partitions)
            await catalog.create_topic(Topic(project="p", name="t", grouped=grouped), first)
            yield world
        finally:
            if kind != "embedded":  # the servers are shared: leave nothing behind
                for name in world.subs:
                    await drop_layout(meta, world.stores, "p", name)
                await store.delete_topic(storage)
                for child in await meta.children("/"):
                    await meta.delete(f"/{child}", recursive=True)


@asynccontextmanager
async def embedded_world(
    tmp_path: Path, partitions: int = 2, grouped: bool = True
) -> AsyncIterator[World]:
    """The world on the embedded metastore and store (SQLite files under ``tmp_path``)."""
    config = EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))
    zk = EmbeddedMetaStoreConfig(path=str(tmp_path / "meta.db"))
    async with _world("embedded", config, zk, "st.1", partitions, grouped) as world:
        yield world


def _zk(real: RealServices, unique: str) -> ZooKeeperConfig:
    return ZooKeeperConfig(hosts=real.zookeeper, root=f"/world-{unique}", session_timeout_s=4.0)


@asynccontextmanager
async def kafka_world(
    real: RealServices, unique: str, partitions: int = 2, grouped: bool = True
) -> AsyncIterator[World]:
    """The world on the real ZooKeeper (a root of its own) and Kafka."""
    config = KafkaClusterConfig(bootstrap_servers=real.kafka)
    storage = f"it.{unique}.world"
    async with _world("kafka", config, _zk(real, unique), storage, partitions, grouped) as world:
        yield world


@asynccontextmanager
async def pulsar_world(
    real: RealServices, unique: str, partitions: int = 2, grouped: bool = True
) -> AsyncIterator[World]:
    """The world on the real ZooKeeper (a root of its own) and Pulsar."""
    config = PulsarClusterConfig(service_url=real.pulsar, admin_url=real.pulsar_admin)
    storage = f"it.{unique}.world"
    async with _world("pulsar", config, _zk(real, unique), storage, partitions, grouped) as world:
        yield world


def real_world(
    kind: str, real: RealServices, unique: str, partitions: int = 2, grouped: bool = True
) -> AbstractAsyncContextManager[World]:
    """:func:`kafka_world` or :func:`pulsar_world` by ``kind``."""
    build = kafka_world if kind == "kafka" else pulsar_world
    return build(real, unique, partitions, grouped)


async def subscribe(world: World, name: str = "s", **fields: object) -> Subscription:
    """Subscription ``name`` of ``p/t`` to the world's endpoint (its path ``name``), signed.

    The circuit breaker is off unless ``fields`` say otherwise: these worlds test retries
    against endpoints that fail most attempts, which a breaker would rightly slow down to its
    probe rate (test_circuit_breaker_kafka.py tests the two together)."""
    fields.setdefault("circuit_breaker", CircuitBreakerPolicy(enabled=False))
    fields.setdefault("endpoint", Endpoint(url=world.hook.url))
    world.subs.append(name)
    return await world.catalog.create_subscription(subscription(name, **fields))


def subscription(
    name: str = "s", url: str = "http://127.0.0.1:9/hook", **fields: object
) -> Subscription:
    """Subscription ``name`` (not stored) of ``p/t`` unless ``fields`` say otherwise, signed
    with :data:`SECRET`, pushing to ``url`` unless ``fields`` name an ``endpoint``."""
    values: dict[str, object] = {
        "project": "p",
        "topic_project": "p",
        "topic": "t",
        "endpoint": Endpoint(url=url),
        "signing_secret": SECRET,
        **fields,
    }
    return Subscription(name=name, **values)  # type: ignore[arg-type]


def record(
    mid: str,
    group: str | None,
    *,
    at: int | None = None,
    value: bytes | None = None,
    **extra: bytes,
) -> Record:
    """A message as the producer service stores it (``group`` None: ungrouped), with the
    headers ``extra`` after the service's own. ``at``: produced at that time (epoch ms, the
    record's timestamp too), else now by the store's clock; ``value``: the payload, else the
    id."""
    produced_at = at if at is not None else int(time.time() * 1000)
    headers = (
        ("x-message-id", mid.encode()),
        *((("x-group-id", group.encode()),) if group is not None else ()),
        ("x-produced-at", str(produced_at).encode()),
        *extra.items(),
    )
    payload = mid.encode() if value is None else value
    key = group.encode() if group else None
    return Record(payload, key=key, headers=headers, timestamp_ms=at)


async def produce(world: World, mid: str, group: str | None, **extra: bytes) -> str:
    """Store one message on the world's first segment, as the producer service would."""
    await world.store.produce(world.storage, record(mid, group, **extra))
    return mid


class Running:
    """``async with Running(world, sub) as runner``: the subscription delivers meanwhile."""

    def __init__(
        self, world: World, sub: Subscription, commit_policy: CommitPolicy | None = None
    ) -> None:
        self.world, self.sub = world, sub
        self.commit_policy = commit_policy or CommitPolicy(every_n=100, every_s=0.2)

    async def __aenter__(self) -> SubscriptionRunner:
        self.sender = HttpSender()
        await self.sender.start()
        self.runner = SubscriptionRunner(
            self.sub, self.world.reader, self.sender, commit_policy=self.commit_policy
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


@asynccontextmanager
async def control_plane(world: World) -> AsyncIterator[httpx.AsyncClient]:
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


async def produce_groups(
    store: SegmentStore,
    name: str,
    groups: int,
    per_group: int,
    extra: dict[str, bytes] | None = None,
    first_seq: int = 0,
) -> list[str]:
    """``per_group`` messages to each of groups ``g0``… on storage topic ``name``, the groups
    interleaved; bodies ``"<group>:<seq>"``, ids ``"<name>-g<group>-<seq>"``, in produce order."""
    ids = []
    for seq in range(first_seq, first_seq + per_group):
        for g in range(groups):
            mid = f"{name}-g{g}-{seq}"
            headers = (
                ("x-message-id", mid.encode()),
                ("x-group-id", f"g{g}".encode()),
                ("x-seq", str(seq).encode()),
                *(extra or {}).items(),
            )
            body, key = f"{g}:{seq}".encode(), f"g{g}".encode()
            await store.produce(name, Record(body, key=key, headers=tuple(headers)))
            ids.append(mid)
    return ids


def in_group_order(received: list[tuple[str, str, bytes]]) -> bool:
    """Whether every group's ``"<group>:<seq>"`` bodies arrived in increasing ``seq``."""
    seqs: dict[str, list[int]] = {}
    for group, _, body in received:
        seqs.setdefault(group, []).append(int(body.split(b":")[1]))
    return all(s == sorted(s) for s in seqs.values())


async def start_runner(
    world: World,
    sub: Subscription,
    commit_policy: CommitPolicy | None = None,
    *,
    reader: SegmentReader | None = None,
    audit: AuditSink | None = None,
) -> tuple[SubscriptionRunner, asyncio.Task[None], HttpSender]:
    """A runner of ``sub`` started on the world's reader (or ``reader``), emitting audit
    events to ``audit`` if given: (runner, its task, its sender)."""
    sender = HttpSender()
    await sender.start()
    policy = commit_policy or CommitPolicy(every_n=50, every_s=0.2)
    runner = SubscriptionRunner(
        sub, reader or world.reader, sender, audit=audit, commit_policy=policy
    )
    return runner, asyncio.create_task(runner.run()), sender


async def stop_runner(task: asyncio.Task[None], sender: HttpSender) -> None:
    """Cancel a runner of :func:`start_runner` (it must end cancelled) and close its sender."""
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await sender.aclose()


class RecordingEndpoint:
    """The hook as the runner tests read it: ``received`` (group, id, body) of the 2xx
    answers, ``attempts`` per id, and two knobs: the first ``fail_first`` attempts of each
    message answer 503 (Retry-After: 0), the ids in ``reject`` answer 400. Every answer takes
    a random 0–10 ms and every signature is checked."""

    def __init__(self, hook: Hook) -> None:
        self.hook = hook
        self.fail_first = 0
        self.reject: set[str] = set()
        rng = random.Random(11)
        hook.secret, hook.behaviour = SECRET, self._answer
        hook.delay = lambda path: rng.uniform(0, 0.01)

    def _answer(self, mid: str, attempt: int) -> tuple[int, dict[str, str]]:
        if mid in self.reject:
            return 400, {}
        if attempt <= self.fail_first:
            return 503, {"Retry-After": "0"}
        return 204, {}

    @property
    def url(self) -> str:
        return self.hook.url

    @property
    def received(self) -> list[tuple[str, str, bytes]]:
        ok = (r for r in self.hook.requests if 200 <= r.status < 300)
        return [(r.headers.get("X-Group-Id", ""), r.id, r.body) for r in ok]

    @property
    def attempts(self) -> dict[str, int]:
        return {mid: len(times) for mid, times in self.hook.tries.items()}

    @property
    def bad_signatures(self) -> int:
        return self.hook.bad_signatures


@dataclass
class EndpointWorld(World):
    endpoint: RecordingEndpoint | None = None  # always set by endpoint_world


@asynccontextmanager
async def endpoint_world(tmp_path: Path, partitions: int = 3) -> AsyncIterator[EndpointWorld]:
    """:func:`embedded_world` with its hook seen as a :class:`RecordingEndpoint`."""
    async with embedded_world(tmp_path, partitions) as world:
        fields = {f.name: getattr(world, f.name) for f in dataclasses.fields(world)}
        yield EndpointWorld(**fields, endpoint=RecordingEndpoint(world.hook))


def runner_segment(segment_id: int, state: SegmentState) -> Segment:
    """Segment ``segment_id`` of :func:`endpoint_world`'s topic (3 partitions)."""
    return segment("embedded", segment_id, state, partitions=3)


async def switch_to_second_segment(world: World, sealing: SegmentStore) -> None:
    """The runner world's cutover: segment 2 (``st.2``) made, segment 1 (``st.1``) sealed
    through ``sealing`` (the world's store or a double in front of it), the switch committed."""
    await world.store.create_topic("st.2", 3, retention_ms=HOUR_MS)
    await world.catalog.add_segment("p", "t", runner_segment(2, SegmentState.PENDING))
    topic = await world.catalog.get_topic("p", "t")
    ends = await sealing.seal("st.1")
    sealed = runner_segment(1, SegmentState.SEALED).model_copy(
        update={"end_positions": ends, "sealed_at": datetime.now(UTC)}
    )
    await world.catalog.commit_segment_switch(topic, sealed, runner_segment(2, SegmentState.ACTIVE))


async def deliver_across_a_seal(world: EndpointWorld, sealing: SegmentStore) -> list[str]:
    """A runner over six messages of segment 1, then :func:`switch_to_second_segment` and six
    more on segment 2, until all twelve reached the endpoint and the runner's pointer is on
    segment 2: the ids produced, in order of production."""
    endpoint = world.endpoint
    assert endpoint is not None
    sub = await subscribe(world)
    first = await produce_groups(world.store, "st.1", 2, 3)
    runner, task, sender = await start_runner(world, sub)
    try:
        await until(lambda: len(endpoint.received) == 6)
        await switch_to_second_segment(world, sealing)
        second = await produce_groups(world.store, "st.2", 2, 3, first_seq=3)
        await until(lambda: len(endpoint.received) == 12)
        await until(
            lambda: (
                runner.sub.consume_pointer is not None
                and runner.sub.consume_pointer.segment_id == 2
            )
        )
    finally:
        await stop_runner(task, sender)
    return first + second


@pytest.fixture(name="world")
async def endpoint_world_fixture(tmp_path: Path) -> AsyncIterator[EndpointWorld]:
    """The ``world`` fixture of the runner tests: ``from … import endpoint_world_fixture``."""
    async with endpoint_world(tmp_path) as built:
        yield built


@pytest.fixture(name="world")
async def embedded_world_fixture(tmp_path: Path) -> AsyncIterator[World]:
    """The ``world`` fixture on embedded files: ``from … import embedded_world_fixture``."""
    async with embedded_world(tmp_path) as built:
        yield built


def quick_running(world: World, sub: Subscription) -> Running:
    """:class:`Running` that commits every 20 messages or 0.1 s."""
    return Running(world, sub, CommitPolicy(every_n=20, every_s=0.1))


async def layout_of(world: World, sub: Subscription, timeout: float = 5) -> Layout:
    """The internal topics of ``sub`` (made by the first hand-off, which runs on its own)."""
    return await until(lambda: load_layout(world.meta, sub), timeout, "the retry layout")

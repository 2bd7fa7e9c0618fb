"""The producer service in process on the embedded backends, with an admin client that
reaches it over a loopback port through uvicorn's protocol with the limits of
:mod:`core.http_server`, as ``python -m producer_api`` serves it (``served="asgi"``: straight
to the ASGI app, for what no HTTP client would send).

async with producer_env(tmp_path, {"orders": {}, "tiny": {"max_message_bytes": 64}}) as env:
    r = await env.client.post(produce_url("orders"), content=b"x")
    assert len(await env.stored("orders")) == 1
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from uvicorn.server import ServerState

from core.http_server import HttpServerLimits, guarded_protocol
from core.model import CircuitBreakerPolicy, Project, Topic
from delivery_workers.http_sender import HttpSender
from delivery_workers.runner import SubscriptionRunner
from delivery_workers.tracking import CommitPolicy
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from producer_api.app import create_app
from producer_api.fastpath import ProducerASGI
from producer_api.service import Service
from producer_api.settings import AuditConfig, ProducerSettings
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import SegmentStore, Stored
from segments.reader import SegmentReader
from tests.support.hook import Hook, serve_hook
from tests.support.until import until
from tests.support.world import segment, subscription

ADMIN = "producer-admin-token-0123456789"
PROJECT = "shop"


def produce_url(topic: str, project: str = PROJECT) -> str:
    return f"/v1/projects/{project}/topics/{topic}/produce"


@dataclass
class ProducerEnv:
    client: httpx.AsyncClient  # sends the admin token
    catalog: Catalog
    store: SegmentStore
    app: ProducerASGI
    subscriptions: int = 0  # made by delivered()

    @property
    def service(self) -> Service:
        found: Service = self.app.state.service
        return found

    async def stored(self, topic: str) -> list[Stored]:
        """Every message stored in ``topic`` (its storage topic is ``st.<topic>``)."""
        found: list[Stored] = []
        for partition, end in (await self.store.end_positions(f"st.{topic}")).items():
            if end:
                found += await self.store.read(
                    f"st.{topic}", partition, 0, max_records=end, timeout=2
                )
        return found

    async def fifty_ordinary(self, topic: str) -> None:
        """50 ordinary produces are all accepted, stored, and delivered by a worker's runner
        reading ``topic`` from its start (after an attack on it, nothing else was lost)."""
        before = len(await self.stored(topic))
        ids = []
        for i in range(50):
            r = await self.client.post(
                produce_url(topic), content=b"ordinary %d" % i, headers={"X-Trace": "t"}
            )
            assert r.status_code == 201, r.text
            ids.append(r.json()["message_id"])
        stored = await self.stored(topic)
        assert len(stored) == before + 50
        stored_ids = {dict(m.headers)["x-message-id"].decode() for m in stored}
        assert set(ids) <= stored_ids
        await self.delivered(topic, set(ids))

    async def delivered(self, topic: str, ids: set[str]) -> None:
        """A new subscription of ``topic`` delivers every message of ``ids`` within seconds."""
        self.subscriptions += 1
        await self.deliver(
            topic,
            f"ordinary{self.subscriptions}",
            lambda hook: ids <= set(hook.ids("o")),
            f"{len(ids)} delivered",
        )

    async def deliver(self, topic: str, name: str, done: Callable[[Hook], bool], what: str) -> Hook:
        """A new subscription ``name`` of ``topic`` from its start, run by a worker's runner
        until ``done(hook)`` (within 15 s): the endpoint (its path ``o``), for more checks."""
        async with serve_hook() as hook:
            sub = subscription(
                name,
                hook.url_for("o"),
                project=PROJECT,
                topic_project=PROJECT,
                topic=topic,
                circuit_breaker=CircuitBreakerPolicy(enabled=False),
            )
            sub = await self.catalog.create_subscription(sub)
            async with HttpSender() as sender:
                reader = SegmentReader(self.catalog, {"embedded": self.store})
                runner = SubscriptionRunner(sub, reader, sender, commit_policy=CommitPolicy())
                task = asyncio.create_task(runner.run())
                try:
                    await until(lambda: done(hook), 15, what)
                finally:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
        return hook


@asynccontextmanager
async def serve_http(
    app: ProducerASGI, limits: HttpServerLimits | None = None
) -> AsyncIterator[int]:
    """``app`` served on this loop by uvicorn's httptools protocol with ``limits`` (the
    default ones if None), on a free loopback port: the port. The app's lifespan is the
    caller's."""
    config = uvicorn.Config(app, lifespan="off", ws="none", log_level="warning")
    config.load()
    state = ServerState()
    protocol = guarded_protocol(limits or HttpServerLimits())
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: protocol(config, state, {}, _loop=loop), "127.0.0.1", 0
    )
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        for connection in list(state.connections):
            connection.shutdown()
        server.close()
        await asyncio.wait_for(server.wait_closed(), 5)


@asynccontextmanager
async def producer_env(
    tmp_path: Path,
    topics: Mapping[str, Mapping[str, Any]],
    served: str = "http",
    **settings: Any,
) -> AsyncIterator[ProducerEnv]:
    """The service with project ``shop`` and ``topics`` (name -> Topic fields), each on one
    embedded segment ``st.<name>`` of 2 partitions; ``settings`` override ProducerSettings;
    ``served``: ``http`` (a loopback port) or ``asgi`` (in process)."""
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "seg.db"))
    config = ProducerSettings(
        admin_token=ADMIN,
        clusters={"embedded": cluster},
        audit=AuditConfig(cluster="embedded", partitions=1),
        member_id="producer-test",
        **settings,
    )
    async with EmbeddedMetaStore(str(tmp_path / "meta.db")) as meta, create_store(cluster) as st:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name=PROJECT))
        for name, fields in topics.items():
            seg = segment("embedded", storage=f"st.{name}", partitions=2)
            await st.create_topic(seg.storage_topic, 2, retention_ms=3_600_000)
            await catalog.create_topic(Topic(project=PROJECT, name=name, **fields), seg)
        app = create_app(config, metastore=meta, stores={"embedded": st})
        limits = config.http_server
        async with app.router.lifespan_context(app), _client(app, served, limits) as client:
            yield ProducerEnv(client, catalog, st, app)


@asynccontextmanager
async def _client(
    app: ProducerASGI, served: str, limits: HttpServerLimits
) -> AsyncIterator[httpx.AsyncClient]:
    auth = {"Authorization": f"Bearer {ADMIN}"}
    if served == "asgi":
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://producer", headers=auth
        ) as client:
            yield client
        return
    async with serve_http(app, limits) as port:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=auth) as c:
            yield c

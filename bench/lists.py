"""Admin API list latency with many topics in one project (issue 35, item 2).

Writes N topics (and S subscriptions) into project ``lists`` through the ``Catalog``
(metadata only: no storage topic is made), then times, through the real control plane app
served over ASGI (``httpx.ASGITransport``, no socket), ~50 requests each of:

- the first page of topics, a page in the middle, and a search (``q=``);
- the first page of subscriptions and the first page of projects.

On ZooKeeper the metadata is written under a root of its own that is kept between runs
(``--root``, default ``/bench-lists``; ``--drop`` deletes it at the end), so a second run
measures at once. It prints p50/p99 per request kind and the load average before and after.

    .venv/bin/python bench/lists.py --backend zookeeper --topics 10000
    .venv/bin/python bench/lists.py --backend embedded --topics 10000

An API without cursors (before issue 35) is measured with ``offset`` for the middle page,
and its search is shown as "n/a" (it ignores ``q``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import bounded, drop_zookeeper_root
from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.errors import AlreadyExists
from core.model import Endpoint, Project, Subscription, Topic
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from metastore.protocol import MetaStore
from metastore.zookeeper import ZooKeeperMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from tests.support.world import segment

PROJECT = "lists"
TOKEN = "bench-lists-admin-token-0123456789"
SECRET = "whsec_" + "A" * 32
SERVICES = Path(os.environ.get("HTTPBUS_SERVICES_FILE", "/tmp/httpbus-services/state.json"))


def topic_name(index: int) -> str:
    return f"t{index:05d}"


async def fill(meta: MetaStore, topics: int, subscriptions: int) -> float:
    """Create what is missing; the seconds it took."""
    catalog = Catalog(meta)
    t0 = time.monotonic()
    try:
        await catalog.create_project(Project(name=PROJECT, description="bench/lists.py"))
    except AlreadyExists:
        pass
    have_topics = set(await catalog.list_topics(PROJECT))
    have_subs = set(await catalog.list_subscriptions(PROJECT))

    def topic(i: int) -> Callable[[], Awaitable[object]]:
        name = topic_name(i)
        first = segment("embedded", storage=f"bench.lists.{name}", partitions=1)
        described = Topic(project=PROJECT, name=name, description=f"orders of shop {i % 97}")
        return lambda: catalog.create_topic(described, first)

    def subscription(i: int) -> Callable[[], Awaitable[object]]:
        sub = Subscription(
            project=PROJECT,
            name=f"s{i:05d}",
            topic_project=PROJECT,
            topic=topic_name(i % max(topics, 1)),
            endpoint=Endpoint(url="http://192.0.2.1/hook"),  # TEST-NET-1: never called
            signing_secret=SECRET,
        )
        return lambda: catalog.create_subscription(sub)

    new_topics = (topic(i) for i in range(topics) if topic_name(i) not in have_topics)
    await bounded(new_topics, 64, tolerate=(AlreadyExists,))
    new_subs = (subscription(i) for i in range(subscriptions) if f"s{i:05d}" not in have_subs)
    await bounded(new_subs, 64, tolerate=(AlreadyExists,))
    return time.monotonic() - t0


@asynccontextmanager
async def control_plane(meta: MetaStore, workdir: Path) -> AsyncIterator[httpx.AsyncClient]:
    cluster = EmbeddedClusterConfig(path=str(workdir / "segments.db"))
    settings = ControlPlaneSettings(
        admin_token=TOKEN,
        clusters={"embedded": cluster},
        database_url=f"sqlite:///{workdir / 'reports.db'}",
    )
    async with create_store(cluster) as store:
        app = create_app(settings, metastore=meta, stores={"embedded": store})
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=transport, base_url="http://cp", headers=headers, timeout=120
            ) as client,
        ):
            yield client


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered) * 1000
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))] * 1000
    return f"p50 {p50:8.1f} ms  p99 {p99:8.1f} ms  (n={len(ordered)})"


async def timed(client: httpx.AsyncClient, url: str, params: dict[str, object], n: int) -> str:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = await client.get(url, params=params)
        samples.append(time.perf_counter() - t0)
        if r.status_code != 200:
            return f"HTTP {r.status_code}: {r.text[:200]}"
    return _ms(samples)


async def middle(client: httpx.AsyncClient, url: str, topics: int) -> dict[str, object] | None:
    """Parameters of the page holding the middle topic: a cursor walked to (cursor API) or
    an offset (an older API); None when the API has neither."""
    first = (await client.get(url, params={"limit": 100})).json()
    if "next_cursor" not in first:
        return {"offset": topics // 2, "limit": 100}
    cursor = first["next_cursor"]
    for _ in range(topics // 200 - 1):
        if cursor is None:
            return None
        page = (await client.get(url, params={"limit": 100, "cursor": cursor})).json()
        cursor = page["next_cursor"]
    return {"limit": 100, "cursor": cursor}


async def measure(client: httpx.AsyncClient, topics: int, n: int) -> dict[str, str]:
    base = f"/v1/projects/{PROJECT}"
    out: dict[str, str] = {}
    out["topics: first page (100)"] = await timed(client, f"{base}/topics", {"limit": 100}, n)
    params = await middle(client, f"{base}/topics", topics)
    if params is not None:
        out["topics: middle page (100)"] = await timed(client, f"{base}/topics", params, n)
    probe = (await client.get(f"{base}/topics", params={"limit": 1})).json()
    if "next_cursor" in probe:
        name_q = {"q": "T0042", "limit": 100}  # t00420…t00429 and t00042: 11 hits
        out["topics: search by name"] = await timed(client, f"{base}/topics", name_q, n)
        none_q = {"q": "no-such-topic", "limit": 100}
        out["topics: search, no hit"] = await timed(client, f"{base}/topics", none_q, n)
        desc_q = {"q": "shop 42", "limit": 100}
        out["topics: search by description"] = await timed(client, f"{base}/topics", desc_q, n)
    else:
        out["topics: search"] = "n/a (this API ignores q)"
    subs = f"{base}/subscriptions"
    out["subscriptions: first page (100)"] = await timed(client, subs, {"limit": 100}, n)
    out["projects: first page (100)"] = await timed(client, "/v1/projects", {"limit": 100}, n)
    return out


def zookeeper_hosts(given: str | None) -> str:
    if given:
        return given
    return str(json.loads(SERVICES.read_text())["endpoints"]["zookeeper"])


async def run(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-lists-") as tmp:
        workdir = Path(tmp)
        meta: MetaStore
        if args.backend == "zookeeper":
            meta = ZooKeeperMetaStore(zookeeper_hosts(args.zookeeper), root=args.root)
        else:
            db = args.embedded_db or str(workdir / "meta.db")
            meta = EmbeddedMetaStore(db)
        async with meta:
            took = await fill(meta, args.topics, args.subscriptions)
            print(
                f"metadata ready in {took:.1f} s: {args.topics} topics, "
                f"{args.subscriptions} subscriptions in project {PROJECT!r}"
            )
            print(f"load average before: {os.getloadavg()}")
            async with control_plane(meta, workdir) as client:
                figures = await measure(client, args.topics, args.requests)
            print(f"load average after:  {os.getloadavg()}")
            for what, figure in figures.items():
                print(f"{args.backend:9}  {what:34} {figure}")
        if args.drop and args.backend == "zookeeper":
            drop_zookeeper_root(zookeeper_hosts(args.zookeeper), args.root.strip("/"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", choices=["zookeeper", "embedded"], default="zookeeper")
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--subscriptions", type=int, default=1_000)
    parser.add_argument("--requests", type=int, default=50, help="per request kind")
    parser.add_argument("--zookeeper", help="hosts (default: from HTTPBUS_SERVICES_FILE)")
    parser.add_argument("--root", default="/bench-lists", help="ZooKeeper root, kept")
    parser.add_argument("--embedded-db", help="embedded metastore file, kept (default: a temp)")
    parser.add_argument("--drop", action="store_true", help="delete the ZooKeeper root at the end")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()

"""The topic list at a modest size on the real ZooKeeper (issue 35 item 2): 2 000 topics in
one project, walked by cursor through the control plane's app while topics are created and
deleted between pages, list every name that existed before the walk exactly once, in order,
within a deadline; a search finds its topics among them. Under a random root znode."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.model import Project, Segment, Topic
from metastore.catalog import Catalog
from metastore.zookeeper import ZooKeeperMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from tests.support.control_plane import TOKEN, app_client, json_of
from tests.support.services import RealServices
from tests.support.world import segment

pytestmark = pytest.mark.zookeeper

TOPICS = 2_000
WALK_DEADLINE_S = 60.0  # 4 pages of 500 on a shared, loaded machine: seconds, not minutes
URL = "/v1/projects/big/topics"


def _topic(name: str, description: str = "") -> tuple[Topic, Segment]:
    first = segment("embedded", storage=f"paging.{name}", partitions=1)
    return Topic(project="big", name=name, description=description), first


async def _create_all(catalog: Catalog, names: list[str]) -> None:
    gate = asyncio.Semaphore(64)

    async def one(name: str) -> None:
        async with gate:
            described = "the Ledger of refunds" if name == "t01234" else f"topic {name}"
            await catalog.create_topic(*_topic(name, described))

    await asyncio.gather(*(one(n) for n in names))


@pytest.fixture
async def world(
    real_services: RealServices, unique: str, tmp_path: Path
) -> AsyncIterator[tuple[Catalog, httpx.AsyncClient]]:
    root = f"/test-list-paging-{unique}"
    cluster = EmbeddedClusterConfig(path=str(tmp_path / "segments.db"))
    settings = ControlPlaneSettings(
        admin_token=TOKEN,
        clusters={"embedded": cluster},
        database_url=f"sqlite:///{tmp_path / 'reports.db'}",
    )
    try:
        async with (
            ZooKeeperMetaStore(real_services.zookeeper, root=root) as meta,
            create_store(cluster) as store,
        ):
            catalog = Catalog(meta)
            await catalog.create_project(Project(name="big"))
            await _create_all(catalog, [f"t{i:05d}" for i in range(TOPICS)])
            app = create_app(settings, metastore=meta, stores={"embedded": store})
            async with app_client(app, timeout=60) as client:
                yield catalog, client
    finally:
        async with ZooKeeperMetaStore(real_services.zookeeper, root="/") as admin:
            await admin.delete(root, recursive=True)


async def _page(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    return json_of(await client.get(URL, params=params))


async def test_pages_list_every_name_once_while_topics_come_and_go(
    world: tuple[Catalog, httpx.AsyncClient],
) -> None:
    catalog, client = world
    before = [f"t{i:05d}" for i in range(TOPICS)]
    seen: list[str] = []
    started = time.monotonic()
    async with asyncio.timeout(WALK_DEADLINE_S):
        page = await _page(client, limit=500)
        while True:
            seen += [t["name"] for t in page["items"]]
            if page["next_cursor"] is None:
                break
            # between pages: a name before the cursor, one after it, and a deletion ahead
            at = len(seen)
            await catalog.create_topic(*_topic(f"a-new-{at}"))
            await catalog.create_topic(*_topic(f"t{at:05d}x"))
            await catalog.delete_topic("big", f"t{at + 7:05d}")
            page = await _page(client, limit=500, cursor=page["next_cursor"])
    took = time.monotonic() - started
    deleted = {f"t{n + 7:05d}" for n in (500, 1000, 1500)}
    assert [n for n in seen if n in set(before)] == [n for n in before if n not in deleted]
    assert len(seen) == len(set(seen)), "a name was listed twice"
    assert not any(n.startswith("a-new-") for n in seen)  # created behind the cursor
    assert {"t00500x", "t01000x", "t01500x"} <= set(seen)  # created ahead of it
    print(f"walked {len(seen)} topics in 4 pages in {took:.2f} s")
    async with asyncio.timeout(WALK_DEADLINE_S):
        found = await _page(client, q="LEDGER")
        assert [t["name"] for t in found["items"]] == ["t01234"]
        named = await _page(client, q="T0199", limit=100)
        assert [t["name"] for t in named["items"]] == [f"t0199{i}" for i in range(10)]

"""Grant requests (docs/catalog.md) on the real ZooKeeper: made in a transaction that checks
the topic, so a request for a deleted topic never makes the topic appear again; two first
requests of one topic racing to make its parent node both land; decisions are compare-and-set;
deleting the topic deletes its requests. Under a random root znode of its own."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest

from core.errors import AlreadyExists, NotFound, VersionConflict
from core.grant_requests import GrantRequest, RequestState
from core.model import Backend, Project, Segment, SegmentState, Topic
from metastore.catalog import Catalog
from metastore.zookeeper import ZooKeeperMetaStore
from tests.support.services import RealServices

pytestmark = pytest.mark.zookeeper


@pytest.fixture
async def catalog(real_services: RealServices, unique: str) -> AsyncIterator[Catalog]:
    root = f"/test-grant-requests-{unique}"
    async with ZooKeeperMetaStore(real_services.zookeeper, root=root) as store:
        catalog = Catalog(store)
        await catalog.create_project(Project(name="shop"))
        segment = Segment(
            id=1,
            cluster="embedded",
            backend=Backend.EMBEDDED,
            storage_topic=f"t-{unique}",
            partitions=1,
            state=SegmentState.ACTIVE,
        )
        await catalog.create_topic(Topic(project="shop", name="orders"), segment)
        yield catalog
    async with ZooKeeperMetaStore(real_services.zookeeper, root="/") as admin:
        await admin.delete(root, recursive=True)


def _asked(grantee: str, topic: str = "orders") -> GrantRequest:
    return GrantRequest(
        project="shop",
        topic=topic,
        grantee=grantee,
        requested_by="user:olga",
        requested_at=datetime.now(UTC),
    )


async def test_requests_on_zookeeper(catalog: Catalog) -> None:
    # Two first requests race to make the parent node: both are stored.
    await asyncio.gather(
        catalog.put_grant_request(_asked("a")), catalog.put_grant_request(_asked("b"))
    )
    listed = await catalog.list_grant_requests("shop", "orders")
    assert [(r.grantee, r.state) for r in listed] == [("a", "pending"), ("b", "pending")]
    with pytest.raises(AlreadyExists):
        await catalog.put_grant_request(_asked("a"))
    # A decision is a compare-and-set on the version read.
    read = await catalog.get_grant_request("shop", "orders", "a")
    decided = await catalog.put_grant_request(
        read.model_copy(update={"state": RequestState.REFUSED})
    )
    assert decided.state is RequestState.REFUSED and decided.version == read.version + 1
    with pytest.raises(VersionConflict):
        await catalog.put_grant_request(read.model_copy(update={"state": RequestState.APPROVED}))
    # No topic, no request, and no topic made by asking.
    with pytest.raises(NotFound):
        await catalog.put_grant_request(_asked("a", topic="ghost"))
    assert await catalog.list_topics("shop") == ["orders"]
    # The topic's deletion takes its requests.
    await catalog.delete_topic("shop", "orders")
    assert await catalog.list_grant_requests("shop", "orders") == []
    with pytest.raises(NotFound):
        await catalog.put_grant_request(_asked("a"))
    assert await catalog.list_topics("shop") == []

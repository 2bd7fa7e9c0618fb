"""A project's rate quota holds across producer processes on real ZooKeeper and Kafka: three
``python -m producer_api`` processes, each hammered by its own clients at more than the
quota, accept together the quota ±10 % (not three times it), refuse the rest with 429 and
``Retry-After``, and another project on the same producers is not throttled."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.errors import QuotaExceeded
from core.model import Project, Topic
from core.quotas import ProjectQuota
from metastore.catalog import Catalog
from metastore.config import ZooKeeperConfig, open_metastore
from segments.config import KafkaClusterConfig
from segments.registry import open_stores
from tests.support.processes import ProducerProcess, producer_processes
from tests.support.services import RealServices
from tests.support.world import segment

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]

ADMIN = "quota-admin-token-0123456789"
QUOTA = 120  # messages per second, for the project, over all three producers
WARM_S, WINDOW_S = 3.0, 5.0


def _settings(real: RealServices, root: str, member: str) -> dict[str, Any]:
    kafka = KafkaClusterConfig(bootstrap_servers=real.kafka)
    return {
        "admin_token": ADMIN,
        "metastore": {"kind": "zookeeper", "hosts": real.zookeeper, "root": root},
        "clusters": {"kafka-main": kafka.model_dump()},
        "member_id": member,
    }


@pytest.fixture
async def root(real_services: RealServices, unique: str) -> AsyncIterator[str]:
    """Projects ``shop`` (with the quota) and ``other`` (without), a Kafka topic each."""
    root = f"/quotas-{unique}"
    kafka = {"kafka-main": KafkaClusterConfig(bootstrap_servers=real_services.kafka)}
    async with contextlib.AsyncExitStack() as stack:
        meta = await stack.enter_async_context(
            open_metastore(ZooKeeperConfig(hosts=real_services.zookeeper, root=root))
        )
        stores = await open_stores(stack, kafka)
        catalog = Catalog(meta)
        made = []
        for project in ("shop", "other"):
            await catalog.create_project(Project(name=project))
            seg = segment("kafka-main", storage=f"it.quota.{unique}.{project}", partitions=2)
            await stores["kafka-main"].create_topic(seg.storage_topic, 2, retention_ms=600_000)
            made.append(seg.storage_topic)
            await catalog.create_topic(Topic(project=project, name="orders"), seg)
        await catalog.quotas.set("shop", ProjectQuota(messages_per_second=QUOTA))
        try:
            yield root
        finally:
            for name in made:
                with contextlib.suppress(Exception):
                    await stores["kafka-main"].delete_topic(name)


@pytest.fixture
def producers(
    real_services: RealServices, root: str, unique: str, tmp_path: Path
) -> Iterator[list[ProducerProcess]]:
    settings = [_settings(real_services, root, f"q{i}-{unique}") for i in range(3)]
    with producer_processes(settings, tmp_path) as procs:
        yield procs


async def test_three_producer_processes_hold_the_quota_together(
    producers: list[ProducerProcess],
) -> None:
    counted: list[dict[int, int]] = [{} for _ in producers]
    retry_after: set[str] = set()
    messages: set[str] = set()
    other: dict[int, int] = {}
    start = time.monotonic()
    end = start + WARM_S + WINDOW_S

    async def hammer(client: httpx.AsyncClient, i: int, url: str) -> None:
        while (now := time.monotonic()) < end:
            r = await client.post(url, content=b"q" * 32)
            if now < start + WARM_S:
                continue
            counted[i][r.status_code] = counted[i].get(r.status_code, 0) + 1
            if r.status_code == 429:
                retry_after.add(r.headers.get("retry-after", "missing"))
                messages.add(r.json()["message"].split(";")[0])

    async def neighbour(client: httpx.AsyncClient, url: str) -> None:
        while time.monotonic() < end:  # a modest load on a project without a quota
            r = await client.post(url, content=b"o")
            other[r.status_code] = other.get(r.status_code, 0) + 1
            await asyncio.sleep(0.02)  # pacing the neighbour's load, not a synchronisation

    headers = {"Authorization": f"Bearer {ADMIN}"}
    limits = httpx.Limits(max_connections=20)
    async with httpx.AsyncClient(headers=headers, timeout=15, limits=limits) as client:
        shop = "/v1/projects/shop/topics/orders/produce"
        loops = [hammer(client, i, p.url + shop) for i, p in enumerate(producers) for _ in range(4)]
        neighbour_url = producers[0].url + "/v1/projects/other/topics/orders/produce"
        await asyncio.gather(*loops, neighbour(client, neighbour_url))
        metrics = (await client.get(producers[1].url + "/metrics")).text

    accepted = [c.get(201, 0) for c in counted]
    asked = [sum(c.values()) for c in counted]
    print(f"\naccepted {accepted} (sum {sum(accepted)}, quota {QUOTA * WINDOW_S:.0f})")
    print(f"asked {asked}; the other project's answers {other}")
    assert sum(accepted) == pytest.approx(QUOTA * WINDOW_S, rel=0.1), counted
    assert all(a / WINDOW_S > QUOTA for a in asked), asked  # each alone asks for more
    assert all(a > 0 for a in accepted), accepted  # every producer got a share
    assert set().union(*counted) == {201, 429}, counted
    assert retry_after == {"1"}, retry_after
    assert messages == {
        f"project shop is over its quota of {QUOTA} messages/s (all producers together)"
    }
    assert set(other) == {201}, other
    assert 'httpbus_project_quota{project="shop",quota="messages_per_second"} 120.0' in metrics


async def test_racing_creates_on_zookeeper_never_pass_the_last_slot(
    real_services: RealServices, unique: str
) -> None:
    """Two ZooKeeper sessions (two control planes) race ten topic creates for 3 slots."""
    config = ZooKeeperConfig(hosts=real_services.zookeeper, root=f"/quota-race-{unique}")
    async with open_metastore(config) as one, open_metastore(config) as two:
        catalogs = [Catalog(one), Catalog(two)]
        await catalogs[0].create_project(Project(name="shop"))
        await catalogs[0].quotas.set("shop", ProjectQuota(max_topics=3))

        async def create(i: int) -> None:
            seg = segment("kafka-main", storage=f"unused.{unique}.{i}", partitions=1)
            await catalogs[i % 2].create_topic(Topic(project="shop", name=f"t{i}"), seg)

        outcomes = await asyncio.gather(*(create(i) for i in range(10)), return_exceptions=True)
        assert sum(o is None for o in outcomes) == 3, outcomes
        assert all(isinstance(o, QuotaExceeded) for o in outcomes if o is not None), outcomes
        assert len(await catalogs[1].list_topics("shop")) == 3

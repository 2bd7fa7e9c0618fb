"""Count quotas: topics and subscriptions per project, checked atomically (a CAS on the
quota node), so concurrent creates never both take the last slot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import QuotaExceeded
from core.model import Project, Topic
from core.quotas import ProjectQuota
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from tests.support.world import segment, subscription

P = "shop"


async def _topic(catalog: Catalog, name: str) -> None:
    await catalog.create_topic(Topic(project=P, name=name), segment("embedded", storage=name))


async def test_a_full_project_refuses_a_topic_naming_the_quota(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name=P))
        await catalog.quotas.set(P, ProjectQuota(max_topics=1))
        await _topic(catalog, "a")
        with pytest.raises(QuotaExceeded) as refused:
            await _topic(catalog, "b")
        assert "max_topics" in refused.value.message and "allows 1" in refused.value.message
        assert refused.value.code.status == 409
        await catalog.delete_topic(P, "a")
        await _topic(catalog, "b")  # a slot freed by a delete is usable again


async def test_concurrent_creates_from_two_stores_never_pass_the_last_slot(
    tmp_path: Path,
) -> None:
    """Two stores on one file stand for two control planes; ten creates race for 3 slots."""
    file = str(tmp_path / "m.db")
    async with EmbeddedMetaStore(file) as one, EmbeddedMetaStore(file) as two:
        catalogs = [Catalog(one), Catalog(two)]
        await catalogs[0].create_project(Project(name=P))
        await catalogs[0].quotas.set(P, ProjectQuota(max_topics=3, max_subscriptions=2))
        outcomes = await asyncio.gather(
            *(_topic(catalogs[i % 2], f"t{i}") for i in range(10)), return_exceptions=True
        )
        assert sum(o is None for o in outcomes) == 3, outcomes
        assert all(isinstance(o, QuotaExceeded) for o in outcomes if o is not None), outcomes
        assert len(await catalogs[0].list_topics(P)) == 3
        topic = (await catalogs[0].list_topics(P))[0]
        subs = await asyncio.gather(
            *(
                catalogs[i % 2].create_subscription(
                    subscription(f"s{i}", project=P, topic_project=P, topic=topic)
                )
                for i in range(6)
            ),
            return_exceptions=True,
        )
        assert sum(not isinstance(s, BaseException) for s in subs) == 2, subs
        assert len(await catalogs[0].list_subscriptions(P)) == 2


async def test_without_a_quota_nothing_is_counted(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name=P))
        for name in ("a", "b", "c"):
            await _topic(catalog, name)
        usage = await catalog.quotas.usage(P)
        assert (usage.topics, usage.quota) == (3, ProjectQuota())

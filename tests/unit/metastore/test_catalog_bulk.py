"""The catalog's bulk reads for list pages and searches (``get_topics``, ``describe_topics``,
``get_subscriptions``, ``describe_subscriptions``, ``describe_projects``): in the order
asked, a missing name left out, the same records as the one-at-a-time reads."""

from __future__ import annotations

from pathlib import Path

from core.model import Project, Topic
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from tests.support.world import segment, subscription


async def test_bulk_descriptions_leave_out_what_is_gone(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "meta.db")) as meta:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop", description="the web shop"))
        for name in ("a", "b", "c"):
            topic = Topic(project="shop", name=name, description=f"about {name}")
            first = segment("embedded", storage=f"bulk.{name}", partitions=1)
            await catalog.create_topic(topic, first)
        fields = {"project": "shop", "topic_project": "shop", "topic": "b"}
        await catalog.create_subscription(subscription("s1", description="the ledger", **fields))
        await catalog.delete_topic("shop", "a")
        topics = await catalog.describe_topics("shop", ["c", "a", "b"])
        assert [(t.name, t.description) for t in topics] == [("c", "about c"), ("b", "about b")]
        assert topics[0].version == (await catalog.get_topic("shop", "c")).version
        whole = await catalog.get_topics("shop", ["c", "a", "b"])
        assert whole == [await catalog.get_topic("shop", n) for n in ("c", "b")]
        assert [s.id for s in whole[0].segments] == [1] and whole[0].produce_pointer
        subs = await catalog.get_subscriptions("shop", ["nope", "s1"])
        assert subs == [await catalog.get_subscription("shop", "s1")]
        assert subs[0].consume_pointer is not None and subs[0].version == 0
        subs = await catalog.describe_subscriptions("shop", ["s1", "nope"])
        assert [(s.name, s.description, s.topic) for s in subs] == [("s1", "the ledger", "b")]
        projects = await catalog.describe_projects(["gone", "shop"])
        assert [(p.name, p.description) for p in projects] == [("shop", "the web shop")]

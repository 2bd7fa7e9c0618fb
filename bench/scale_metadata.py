"""The metadata of bench/scale.py: M/10 topics in project ``big`` and M subscriptions over
:data:`PROJECTS`, written through :class:`metastore.catalog.Catalog` on a ZooKeeper root of
the run's own, as the control plane writes them (no storage topic is made)."""

from __future__ import annotations

import base64
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._support import bounded
from core.model import Endpoint, Project, Segment, Subscription, Topic
from metastore.catalog import Catalog
from metastore.zookeeper import ZooKeeperMetaStore
from tests.support.world import segment

BIG = "big"
PROJECTS = [f"p{i:03d}" for i in range(100)]
ENDPOINT = "http://192.0.2.1/hook"  # TEST-NET-1: never called (the members deliver nothing)


def _topic(name: str) -> tuple[Topic, Segment]:
    first = segment("kafka-main", storage=f"scale.{name}", partitions=4)
    return Topic(project=BIG, name=name), first


def _subscription(project: str, index: int, topics: int, secret: str) -> Subscription:
    return Subscription(
        project=project,
        name=f"s{index:06d}",
        topic_project=BIG,
        topic=f"t{index % topics:05d}",
        endpoint=Endpoint(url=ENDPOINT),
        signing_secret=secret,
    )


async def create_metadata(zk: str, root: str, size: int, concurrency: int) -> dict[str, float]:
    """Create the run's metadata; how long each kind took and its rate."""
    topics = max(1, size // 10)
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()
    async with ZooKeeperMetaStore(zk, root=root) as meta:
        catalog = Catalog(meta)
        for name in [BIG, *PROJECTS]:
            await catalog.create_project(Project(name=name))
        t0 = time.monotonic()
        await bounded(
            (lambda n=n: catalog.create_topic(*_topic(f"t{n:05d}")) for n in range(topics)),
            concurrency,
        )
        t1 = time.monotonic()
        subs = (_subscription(PROJECTS[i % len(PROJECTS)], i, topics, secret) for i in range(size))
        await bounded(
            (lambda sub=sub: catalog.create_subscription(sub) for sub in subs), concurrency
        )
        t2 = time.monotonic()
    return {
        "create_s": t2 - t0,
        "topics_per_s": topics / max(t1 - t0, 1e-9),
        "subscriptions_per_s": size / max(t2 - t1, 1e-9),
    }

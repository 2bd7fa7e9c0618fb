"""A subscription's internal topics: its delay levels, hold topic, replay topic and DLQ
(:mod:`segments.subscription.layout`), and the sources that read them back.

They are made on first need: :meth:`InternalTopics.open` loads the layout if the topics
exist, and the hand-off (:mod:`.handoff`) calls :meth:`InternalTopics.create` before its
first write; :attr:`InternalTopics.ready` is set once they exist, so their readers
(:mod:`.retry_readers`) start then. Each source reads its topic under the subscription's
commit group (the shard's), from its committed position.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from core.model import Subscription
from core.shards import WHOLE, Shard
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore
from segments.reader import commit_group
from segments.subscription.layout import Layout, base_name, ensure_layout, load_layout

from .items import Source
from .tracking import AuditBarrier, CommitPolicy


@dataclass(eq=False)
class InternalTopics:
    """See the module doc."""

    sub: Subscription
    meta: MetaStore
    stores: dict[str, SegmentStore]
    layout: Layout
    policy: CommitPolicy
    shard: Shard = WHOLE  # every shard reads the shared internal topics, keeps its own
    sources: dict[str, Source] = field(init=False, default_factory=dict)
    # Set once the topics exist and their sources are open.
    ready: asyncio.Event = field(init=False, default_factory=asyncio.Event)

    @classmethod
    async def open(
        cls,
        sub: Subscription,
        meta: MetaStore,
        stores: dict[str, SegmentStore],
        cluster: str,
        policy: CommitPolicy,
        shard: Shard = WHOLE,
    ) -> InternalTopics:
        """The subscription's topics as stored (a new level added when the policy names one
        more), or the layout they will have, on ``cluster``, if they do not exist yet."""
        layout = await load_layout(meta, sub)
        created = layout is not None
        if layout is None:
            layout = Layout(cluster, base_name(sub), tuple(sub.retry.delay_levels_ms))
        elif not set(sub.retry.delay_levels_ms) <= set(layout.levels_ms):
            layout = await ensure_layout(meta, stores, sub, cluster)
        topics = cls(sub, meta, stores, layout, policy, shard)
        if created:
            await topics._open_sources()
        return topics

    @property
    def store(self) -> SegmentStore:
        return self.stores[self.layout.cluster]

    @property
    def created(self) -> bool:
        return self.ready.is_set()

    @property
    def levels(self) -> tuple[int, ...]:
        return self.layout.levels_ms

    @property
    def hold(self) -> Source:
        return self.sources[self.layout.hold]

    def level(self, ms: int) -> Source:
        return self.sources[self.layout.level(ms)]

    async def create(self) -> None:
        """Before the first hand-off: create the topics (if they do not exist yet)."""
        if self.created:
            return
        self.layout = await ensure_layout(self.meta, self.stores, self.sub, self.layout.cluster)
        await self._open_sources()

    async def _open_sources(self) -> None:
        group = commit_group(self.sub, self.shard)
        names = [self.layout.hold, self.layout.replay, *map(self.layout.level, self.levels)]
        for name in names:
            committed = (await self.store.committed(name, group)).get(0, 0)
            self.sources[name] = Source(self.store, name, group, {0: committed}, self.policy)
        self.ready.set()

    async def commit(self, barrier: AuditBarrier | None = None) -> bool:
        """Commit every source (False if one was held back, see :meth:`.items.Source.commit`)."""
        done = True
        for source in list(self.sources.values()):
            done = await source.commit(barrier) and done
        return done

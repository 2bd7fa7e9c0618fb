"""A subscription's internal storage topics, named in this one place, and the retry headers.

Every subscription owns, on one storage cluster (the cluster of its consume segment when it
first needed them, recorded in the metastore at ``paths.internal_topics``):

- ``{base}.delay.{ms}ms`` — one *delay level* per configured delay (FIFO, one partition): a
  message that must wait *d* is appended to the largest level not longer than *d*;
- ``{base}.hold`` — messages of a blocked group, in order, waiting behind the group's head;
- ``{base}.replay`` — messages unsidelined from the DLQ, replayed through the normal path;
- ``{base}.dlq`` — the dead-letter queue: entries, and *removal* records (purge, unsideline)
  that name the entry positions they remove. The topic itself is the index: see
  :mod:`segments.subscription.dlq`.

``base`` carries the subscription's creation time, so a subscription deleted and created
again under the same name never inherits the old one's retries or DLQ.

A message in an internal topic keeps its payload, key and stored headers as produced, plus
``x-httpbus-*`` headers (:class:`~.retry_meta.RetryMeta`) that the delivery request never
carries.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace

from core.errors import AlreadyExists, HttpbusError, NotFound
from core.model import Subscription
from metastore import paths
from metastore.protocol import MetaStore

from ..protocol import SegmentStore

log = logging.getLogger(__name__)

INTERNAL_RETENTION_MS = 14 * 24 * 3_600_000


@dataclass(frozen=True)
class Layout:
    """Where one subscription's internal topics live."""

    cluster: str
    base: str
    levels_ms: tuple[int, ...] = ()  # every level ever created (a policy change keeps old ones)

    def level(self, ms: int) -> str:
        return f"{self.base}.delay.{ms}ms"

    @property
    def hold(self) -> str:
        return f"{self.base}.hold"

    @property
    def replay(self) -> str:
        return f"{self.base}.replay"

    @property
    def dlq(self) -> str:
        return f"{self.base}.dlq"

    def topics(self) -> list[str]:
        return [self.hold, self.replay, self.dlq, *(self.level(ms) for ms in self.levels_ms)]

    def to_bytes(self) -> bytes:
        return json.dumps(
            {"cluster": self.cluster, "base": self.base, "levels_ms": list(self.levels_ms)}
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Layout:
        raw = json.loads(data)
        return cls(str(raw["cluster"]), str(raw["base"]), tuple(int(x) for x in raw["levels_ms"]))


def base_name(sub: Subscription) -> str:
    created_ms = int(sub.created_at.timestamp() * 1000)
    return f"httpbus.internal.{sub.project}.{sub.name}.{created_ms}"


async def load_layout(meta: MetaStore, sub: Subscription) -> Layout | None:
    """The subscription's internal topics, or None if it never needed any."""
    node = await meta.get(paths.internal_topics(sub.project, sub.name))
    if node is None:
        return None
    layout = Layout.from_bytes(node.data)
    return layout if layout.base == base_name(sub) else None


async def ensure_layout(
    meta: MetaStore, stores: Mapping[str, SegmentStore], sub: Subscription, cluster: str
) -> Layout:
    """Create (idempotently) the internal topics ``sub`` needs now — hold, replay, DLQ and a
    level per delay of its policy — and record them. ``cluster`` is used only the first time."""
    path = paths.internal_topics(sub.project, sub.name)
    node = await meta.get(path)
    old = Layout.from_bytes(node.data) if node is not None else None
    if old is not None and old.base != base_name(sub):  # left by a deleted namesake
        await _drop_topics(stores, old)
        await meta.delete(path)
        node, old = None, None
    layout = old or Layout(cluster, base_name(sub))
    levels = tuple(sorted(set(layout.levels_ms) | set(sub.retry.delay_levels_ms)))
    layout = replace(layout, levels_ms=levels)
    store = stores.get(layout.cluster)
    if store is None:
        raise NotFound(f"storage cluster {layout.cluster!r} of the internal topics is not here")
    for name in layout.topics():
        if await store.partitions(name) is None:
            try:
                await store.create_topic(name, 1, retention_ms=INTERNAL_RETENTION_MS)
            except AlreadyExists:
                pass
    if node is None:
        try:
            await meta.create(path, layout.to_bytes())
        except AlreadyExists:
            pass
    elif layout != old:
        await meta.update(path, layout.to_bytes(), expected_version=node.version)
    return layout


async def drop_layout(meta: MetaStore, stores: Mapping[str, SegmentStore], p: str, s: str) -> None:
    """Delete a (deleted) subscription's internal topics and their record."""
    path = paths.internal_topics(p, s)
    node = await meta.get(path)
    if node is None:
        return
    await _drop_topics(stores, Layout.from_bytes(node.data))
    try:
        await meta.delete(path)
    except NotFound:
        pass


async def _drop_topics(stores: Mapping[str, SegmentStore], layout: Layout) -> None:
    store = stores.get(layout.cluster)
    if store is None:
        return
    for name in layout.topics():
        try:
            await store.delete_topic(name)
        except NotFound:
            pass
        except HttpbusError as exc:  # an orphan costs storage only; say so
            log.warning("could not delete internal topic %s: %s", name, exc)

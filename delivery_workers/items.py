"""What moves along a subscription's path: an :class:`Item` (a message and where it came
from) and a :class:`Source` (a storage topic read and committed in order)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from enum import Enum

from segments.protocol import SegmentStore, Stored
from segments.subscription.retry_meta import RetryMeta

from .tracking import AuditBarrier, CommitPolicy, CommitTracker


class Kind(Enum):
    FRESH = "fresh"  # read from the subscription's consume segment
    DUE = "due"  # a head whose time came, from a delay level
    REPLAY = "replay"  # unsidelined from the DLQ
    RELEASED = "released"  # a follower released from the hold topic


class Source:
    """One storage topic (all its partitions) the runner reads under the subscription's
    commit group; a message read is tracked, and committed once it and all before it are
    terminal. Internal topics have one partition."""

    def __init__(
        self,
        store: SegmentStore,
        name: str,
        group: str,
        starts: dict[int, int],
        policy: CommitPolicy,
    ) -> None:
        self.store = store
        self.name = name
        self.group = group
        self.policy = policy
        self.tracker = CommitTracker()
        for partition, position in starts.items():
            self.tracker.start(partition, position)

    def track(self, msg: Stored) -> None:
        self.tracker.track(msg.partition, msg.position, msg.timestamp_ms)

    def done(self, msg: Stored) -> None:
        self.tracker.done(msg.partition, msg.position)
        self.policy.record()

    def pending(self) -> int:
        return self.tracker.pending()

    async def lag(self) -> int:
        """Messages stored in the partitions read here and not committed yet."""
        known = {p: self.tracker.committed(p) for p in self.tracker.partitions}
        backlog = await self.store.backlog(self.name, self.group, known)
        return sum(backlog.get(p, 0) for p in self.tracker.partitions)

    async def commit(self, barrier: AuditBarrier | None = None) -> bool:
        """Commit what is terminal; False if held back: the audit events of the messages
        below it (emitted before the positions were taken) are not durable yet."""
        mark = barrier.mark() if barrier is not None else 0
        positions = self.tracker.committable_all()
        if not positions:
            return True
        if barrier is not None and not await barrier.durable(mark):
            return False
        await self.store.commit(self.name, self.group, positions)
        self.tracker.mark_all_committed(positions)
        return True


@dataclass(eq=False)
class Item:
    """A message on its way: ``msg`` as read from ``source`` (its payload and own headers are
    the produced ones; internal topics add ``x-httpbus-*``), ``meta`` what the retry path
    knows of it. ``not_before_ms`` holds a short wait (shorter than every delay level) in
    memory before the first attempt. Compared by identity."""

    msg: Stored
    source: Source
    kind: Kind
    group: str | None
    meta: RetryMeta
    not_before_ms: int = 0

    @property
    def origin(self) -> str:
        return self.meta.origin


def now_ms() -> int:
    return int(time.time() * 1000)


async def sleep_until(epoch_ms: int) -> None:
    wait = (epoch_ms - now_ms()) / 1000
    if wait > 0:
        await asyncio.sleep(wait)


@dataclass(eq=False)
class Held:
    """A follower in the hold topic: ``item`` until the hold acknowledged it, then
    ``stored`` (the hold record). ``dead`` once it followed its head into the DLQ."""

    item: Item
    stored: Stored | None = None
    dead: bool = False

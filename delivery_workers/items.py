"""What moves along a subscription's path: an :class:`Item` (a message and where it came
from) and a :class:`Source` (a storage topic read and committed in order)."""

from __future__ import annotations

import asyncio
import math
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


CAUGHT_UP_S = 3.0  # how old an empty read may be to say a partition is read to its end


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
        # Per partition, the last read that found nothing: (its start, when it ended).
        self._found_nothing: dict[int, tuple[int, float]] = {}
        self._clock = time.monotonic

    def track(self, msg: Stored) -> None:
        self.tracker.track(msg.partition, msg.position, msg.timestamp_ms)

    def done(self, msg: Stored) -> None:
        self.tracker.done(msg.partition, msg.position)
        self.policy.record()

    def pending(self) -> int:
        return self.tracker.pending()

    def read_at(self, partition: int, position: int, found: int) -> None:
        """A read of ``partition`` from ``position`` returned ``found`` messages."""
        if found:
            self._found_nothing.pop(partition, None)
        else:
            self._found_nothing[partition] = (position, self._clock())

    def waiting_at(self, partition: int, position: int) -> None:
        """A read of ``partition`` from ``position`` waits at its end for news
        (``SegmentIntake._idle_read``): until it returns, the partition counts as read to
        its end, however long the wait."""
        self._found_nothing[partition] = (position, math.inf)

    def caught_up(self, within_s: float = CAUGHT_UP_S) -> bool:
        """Whether every partition is read to its end and committed there: its last read,
        at most ``within_s`` ago, found nothing from the position committed."""
        now = self._clock()
        for p in self.tracker.partitions:
            found = self._found_nothing.get(p)
            if found is None or now - found[1] > within_s or found[0] != self.tracker.committed(p):
                return False
        return bool(self.tracker.partitions)

    async def lag(self) -> int:
        """Messages stored in the partitions read here and not committed yet. Caught up
        (:meth:`caught_up`), that is 0 with no storage call: an idle subscription's lag
        sample cost two offset requests to Kafka (2 000 idle subscriptions on a worker: 800
        requests a second); a read that stopped (an open circuit) is soon too old to count."""
        if self.caught_up():
            return 0
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

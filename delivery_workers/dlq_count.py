"""What a subscription's DLQ holds, counted by the worker that runs it. Pure, no I/O.

The figures the status shows (``dlq`` in ``/status/{p}:{s}``, see :mod:`.status`) come from
here, so neither the status page, the subscription list nor the overview reads the DLQ per
request. The count follows the DLQ topic itself, the one truth any process can read
(:mod:`segments.subscription.dlq`):

- the **baseline**: when a runner takes the subscription its readers scan the DLQ once to
  rebuild the group state (:meth:`.retry_readers.RetryReaders.rebuild`); every live entry of
  the runner's shard is counted then (:meth:`DlqCount.reset`);
- afterwards the runner's DLQ tail reads every record appended: an entry (dead-lettered by
  this worker, or by another shard's) is counted as a *failed head* (attempted, failed for
  good) or a *sidelined* follower (never attempted: it followed its group's failed head);
- a *removal* record (a purge, an unsideline, a recovery: the control plane appends one
  naming the positions it took out) takes those entries off the count. So a purge or a
  replay from any control plane keeps the count true with no second channel: the worker
  reads the same record that makes the entries disappear from every browse.

The count is as fresh as the tail (a read a second while idle). While the worker holds the
subscription but no runner runs it (paused, disabled), :func:`follow_idle` keeps the count
true instead: every ``IDLE_READ_S`` it asks the DLQ's end and reads what was appended since
(a purge's removal, say) — a scan first if no runner ever counted it here. ``live`` is false
while the count could not be brought up to date (its storage away).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from core.envelope import GROUP_ID, header
from core.errors import HttpbusError
from core.model import Subscription
from core.shards import Shard
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore, Stored
from segments.subscription import dlq
from segments.subscription.layout import Layout, load_layout
from segments.subscription.retry_meta import RetryMeta, origin_partition

log = logging.getLogger(__name__)
IDLE_READ_S = 2.0


def owned(shard: Shard, msg: Stored) -> bool:
    """Whether an internal record belongs to ``shard``: by its group, else by the partition
    it was first read from (the runner's readers and the count agree on it)."""
    if shard.whole:
        return True
    group = header(msg.headers, GROUP_ID)
    return shard.owns(group, origin_partition(RetryMeta.of(msg.headers).origin))


@dataclass
class DlqCount:
    """Live DLQ positions of one subscription (shard), by kind. Example::

    >>> count = DlqCount()
    >>> count.reset([(0, False), (1, True), (2, True)], read_to=3)
    >>> count.removed([1, 7])
    >>> count.figures()
    {'size': 2, 'failed_heads': 1, 'sidelined': 1, 'read_to': 3, 'live': True}
    """

    _heads: set[int] = field(default_factory=set)
    _sidelined: set[int] = field(default_factory=set)
    read_to: int = 0  # every DLQ record before this position is counted
    live: bool = False  # a runner's tail keeps it up to date now
    known: bool = False  # a baseline was taken (else the figures say nothing)

    def reset(self, entries: Iterable[tuple[int, bool]], read_to: int) -> None:
        """The baseline: every live entry ``(position, sidelined)`` as the scan found it."""
        self._heads.clear()
        self._sidelined.clear()
        for position, behind in entries:
            (self._sidelined if behind else self._heads).add(position)
        self.read_to = read_to
        self.known = self.live = True

    def seen(self, position: int, sidelined: bool) -> None:
        """An entry appended at ``position`` (counted once, however often it is read)."""
        (self._sidelined if sidelined else self._heads).add(position)
        self.read_to = max(self.read_to, position + 1)

    def read(self, records: Iterable[Stored], shard: Shard) -> None:
        """Apply DLQ records read in order: removals, and ``shard``'s entries."""
        for msg in records:
            if dlq.is_removal(msg):
                self.removed(dlq.removed_positions(msg), msg.position)
            elif owned(shard, msg):
                self.seen(msg.position, dlq.sidelined(msg))
            else:
                self.read_to = max(self.read_to, msg.position + 1)

    def removed(self, positions: Iterable[int], at: int | None = None) -> None:
        """A removal record (at position ``at``) took ``positions`` out."""
        for position in positions:
            self._heads.discard(position)
            self._sidelined.discard(position)
        if at is not None:
            self.read_to = max(self.read_to, at + 1)

    @property
    def size(self) -> int:
        return len(self._heads) + len(self._sidelined)

    @property
    def failed_heads(self) -> int:
        return len(self._heads)

    @property
    def sidelined(self) -> int:
        return len(self._sidelined)

    def figures(self) -> dict[str, int | bool] | None:
        """What the status document carries; None before any baseline."""
        if not self.known:
            return None
        return {
            "size": self.size,
            "failed_heads": self.failed_heads,
            "sidelined": self.sidelined,
            "read_to": self.read_to,
            "live": self.live,
        }


async def follow_idle(
    count: DlqCount,
    meta: MetaStore,
    stores: Mapping[str, SegmentStore],
    sub: Subscription,
    shard: Shard,
    interval_s: float = IDLE_READ_S,
) -> None:
    """Keep ``count`` true while no runner runs ``sub`` (see the module doc), until
    cancelled. Each round costs one end-position request to the DLQ's storage (the layout
    is read from the metastore until the DLQ exists, then kept), and a read only of what
    was appended."""
    layout: Layout | None = None
    while True:
        try:
            layout = layout or await load_layout(meta, sub)
            if layout is None:  # no DLQ yet
                count.reset((), 0)
            else:
                await _catch_up(count, stores, layout, shard)
        except HttpbusError as exc:  # the storage is away: the last count, not live
            count.live = False
            log.debug("%s/%s: DLQ count not brought up to date: %s", sub.project, sub.name, exc)
        await asyncio.sleep(interval_s)


async def _catch_up(
    count: DlqCount, stores: Mapping[str, SegmentStore], layout: Layout, shard: Shard
) -> None:
    store = stores.get(layout.cluster)
    if store is None:
        raise HttpbusError(f"the DLQ's storage cluster {layout.cluster!r} is not here")
    if not count.known:
        view = await dlq.scan(store, layout)
        entries = [(p, dlq.sidelined(m)) for p, m in view.entries.items() if owned(shard, m)]
        count.reset(entries, view.end)
        return
    end = (await store.end_positions(layout.dlq)).get(0, 0)
    if end > count.read_to:
        count.read(await dlq.read_all(store, layout.dlq, count.read_to, end), shard)
        count.read_to = max(count.read_to, end)
    count.live = True

"""The durable retry path of one subscription: delay levels, hold topic, replay, DLQ.

Where a message goes (:meth:`RetryPath.admit`, :meth:`retry`, :meth:`dead_letter`):

- a message that must wait *d* (a retry's backoff or ``Retry-After``, a producer's
  ``X-Deliver-At`` / ``X-Delay-Ms``, a subscription's ``delay_ms``) goes to the largest delay
  level not longer than *d*, with its due time; shorter waits are held in memory while the
  source position stays uncommitted. Each level's reader waits for its head: when the
  level's delay has passed the message is re-routed to the level that fits what is left,
  or, with less left than the smallest level, delivered at its due time;
- on a grouped topic a message waiting in a level is its group's *head*; the group's later
  messages go to the hold topic behind it and are released, in order, after it;
- a message past its attempts, or refused for good, goes to the DLQ; on a grouped topic the
  group's followers follow it there, and the group is *sidelined* (its new messages go to
  the DLQ too) until its entries are unsidelined or purged (see :mod:`.groupstate`);
- unsidelined entries come back through the replay topic with their attempts reset.

Every hand-off goes through one :class:`HandOff` in order, and the source message becomes
terminal (committable) only when the storage acknowledged the hand-off. Each subscription
has its own readers and writer, so one subscription's retry traffic never holds up another's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from core.audit import AuditType
from core.envelope import DELIVER_AT, GROUP_ID, PRODUCED_AT, header, millis
from core.model import Subscription
from core.retry import level_for
from core.shards import WHOLE, Shard
from metastore.protocol import MetaStore
from segments import dlq
from segments.internal import (
    Layout,
    RetryMeta,
    base_name,
    ensure_layout,
    internal_record,
    load_layout,
    origin_partition,
)
from segments.protocol import Produced, SegmentStore, Stored
from segments.reader import commit_group

from .commit import CommitPolicy
from .groupstate import GroupStates
from .handoff import HandOff
from .items import Held, Item, Kind, Source, now_ms, sleep_until
from .outcomes import Outcomes

log = logging.getLogger(__name__)
_READ_TIMEOUT_S = 1.0


Offer = Callable[[Item], Awaitable[None]]
Audit = Callable[..., None]


class RetryPath(Outcomes):
    """See the module doc. ``offer`` queues an item for delivery (waiting for room);
    ``audit(kind, msg, **extra)`` records an event."""

    def __init__(
        self,
        sub: Subscription,
        meta: MetaStore,
        stores: dict[str, SegmentStore],
        layout: Layout,
        created: bool,
        offer: Offer,
        audit: Audit,
        policy: CommitPolicy,
        shard: Shard = WHOLE,
    ) -> None:
        self.sub = sub
        self.shard = shard  # every shard reads the shared internal topics, keeps its own
        self.meta = meta
        self.stores = stores
        self.layout = layout
        self.store = stores[layout.cluster]
        self.created = created
        self.offer = offer
        self.audit = audit
        self.policy = policy
        self.groups: GroupStates[Held] = GroupStates()
        self.handoff = HandOff(self.store, layout.hold)
        self.handoff.prepare = self._create
        self.sources: dict[str, Source] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._dlq_end = 0
        self._skip: set[tuple[str, int]] = set()  # stale level copies (see _rebuild)
        self.counts = {"retried": 0, "dead_lettered": 0, "delayed": 0, "held": 0}

    @classmethod
    async def open(
        cls,
        sub: Subscription,
        meta: MetaStore,
        stores: dict[str, SegmentStore],
        cluster: str,
        offer: Offer,
        audit: Audit,
        policy: CommitPolicy,
        shard: Shard = WHOLE,
    ) -> RetryPath:
        """Load the subscription's internal topics (made on first need) and rebuild the
        state of its groups from them."""
        layout = await load_layout(meta, sub)
        created = layout is not None
        if layout is None:
            layout = Layout(cluster, base_name(sub), tuple(sub.retry.delay_levels_ms))
        elif not set(sub.retry.delay_levels_ms) <= set(layout.levels_ms):
            layout = await ensure_layout(meta, stores, sub, cluster)
        path = cls(sub, meta, stores, layout, created, offer, audit, policy, shard)
        if created:
            await path._open_sources()
            await path._rebuild()
        return path

    # ------------------------------------------------------------ lifecycle
    async def _create(self) -> None:
        """Before the first hand-off: create the internal topics and start their readers."""
        if self.created:
            return
        self.layout = await ensure_layout(self.meta, self.stores, self.sub, self.layout.cluster)
        self.created = True
        await self._open_sources()
        self.start_readers()

    async def _open_sources(self) -> None:
        group = commit_group(self.sub, self.shard)
        names = [self.layout.hold, self.layout.replay, *map(self.layout.level, self.levels)]
        for name in names:
            committed = (await self.store.committed(name, group)).get(0, 0)
            self.sources[name] = Source(self.store, name, group, {0: committed}, self.policy)

    def start(self) -> None:
        """Start the writer, and the readers if the internal topics exist."""
        self._spawn(self.handoff.run())
        if self.created:
            self.start_readers()

    def start_readers(self) -> None:
        for ms in self.levels:
            self._spawn(self._level_loop(ms, self.sources[self.layout.level(ms)]))
        self._spawn(self._replay_loop(self.sources[self.layout.replay]))
        self._spawn(self._dlq_tail())
        for group in self.groups:
            if self.groups.sidelined(group) and not self.groups.has_head(group):
                why = f"follows the dead-lettered messages of group {group}"
                for held in self.groups.take_all_followers(group):
                    self._follower_to_dlq(held, why)
            self._release(group)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def commit(self) -> None:
        for source in list(self.sources.values()):
            await source.commit()

    # ------------------------------------------------------------ rebuild
    async def _rebuild(self) -> None:
        """Group state from the storage: sidelined groups from the DLQ, heads from the
        levels, followers from the hold topic (see :mod:`.groupstate`).

        A crash can leave a message both in the DLQ and, uncommitted, in a level or the hold
        topic (its hand-off was stored, the commit of where it came from was not): the live
        DLQ entry wins, the stale copy is skipped, so a dead-lettered head is not delivered
        behind its group's back."""
        view = await dlq.scan(self.store, self.layout)
        dead = {RetryMeta.of(m.headers).origin for m in view.live()}
        for position, msg in view.entries.items():
            group = header(msg.headers, GROUP_ID)
            if group is not None and self._mine(msg):
                self.groups.dead_seen(group, position)
        self._dlq_end = view.end
        for ms in self.levels:
            source = self.sources[self.layout.level(ms)]
            for msg in await dlq.read_all(self.store, source.name, source.tracker.committed(0)):
                origin = RetryMeta.of(msg.headers).origin
                if origin in dead or not self._mine(msg):
                    self._skip.add((source.name, msg.position))
                    continue
                group = header(msg.headers, GROUP_ID)
                if group is not None:
                    self.groups.add_head(group, origin)
        hold = self.sources[self.layout.hold]
        for msg in await dlq.read_all(self.store, hold.name, hold.tracker.committed(0)):
            hold.track(msg)
            group = header(msg.headers, GROUP_ID)
            meta = RetryMeta.of(msg.headers)
            if meta.origin in dead or not self._mine(msg):
                hold.done(msg)
                continue
            if group is None:  # cannot happen (only grouped messages are held): deliver
                self._spawn(self.offer(Item(msg, hold, Kind.RELEASED, None, meta)))
                continue
            item = Item(msg, hold, Kind.RELEASED, group, meta)
            self.groups.follow(group, Held(item, stored=msg))

    # ------------------------------------------------------------ readers
    async def _level_loop(self, ms: int, source: Source) -> None:
        position = source.tracker.committed(0)
        while True:
            batch = await self.store.read(
                source.name, 0, position, max_records=200, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                source.track(msg)
                if (source.name, msg.position) in self._skip or not self._mine(msg):
                    source.done(msg)
                    continue
                meta = RetryMeta.of(msg.headers)
                await sleep_until(min(meta.entered_ms + ms, meta.due_ms))  # FIFO: the head
                await self._level_due(msg, source, meta)

    async def _level_due(self, msg: Stored, source: Source, meta: RetryMeta) -> None:
        level = level_for(self.sub.retry.delay_levels_ms, meta.due_ms - now_ms())
        if level is not None:  # re-route: what is left still fills a level
            record = internal_record(msg, replace(meta, entered_ms=now_ms()))
            self.handoff.submit(self.layout.level(level), record, lambda _: source.done(msg))
            return
        group = header(msg.headers, GROUP_ID)
        item = Item(msg, source, Kind.DUE, group, meta)
        if meta.due_ms <= now_ms():
            await self.offer(item)
        else:  # its group is blocked by it already: wait outside the delivery slots
            self._spawn(self._offer_at(item, meta.due_ms))

    async def _offer_at(self, item: Item, due_ms: int) -> None:
        await sleep_until(due_ms)
        await self.offer(item)

    async def _replay_loop(self, source: Source) -> None:
        position = source.tracker.committed(0)
        while True:
            batch = await self.store.read(
                source.name, 0, position, max_records=200, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                source.track(msg)
                if not self._mine(msg):  # another shard's
                    source.done(msg)
                    continue
                group = header(msg.headers, GROUP_ID)
                item = Item(msg, source, Kind.REPLAY, group, RetryMeta.of(msg.headers))
                self.audit(AuditType.UNSIDELINED, msg)
                await self.admit(item)

    async def _dlq_tail(self) -> None:
        position = self._dlq_end
        while True:
            batch = await self.store.read(
                self.layout.dlq, 0, position, max_records=500, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                if dlq.is_removal(msg):
                    self.groups.dead_removed(dlq.removed_positions(msg))
                    continue
                group = header(msg.headers, GROUP_ID)
                if group is not None and self._mine(msg):
                    self.groups.dead_seen(group, msg.position)

    def _mine(self, msg: Stored) -> bool:
        """Whether an internal record belongs to this runner's shard: by its group, else by
        the partition it was first read from."""
        if self.shard.whole:
            return True
        group = header(msg.headers, GROUP_ID)
        return self.shard.owns(group, origin_partition(RetryMeta.of(msg.headers).origin))

    # ------------------------------------------------------------ routing
    async def admit(self, item: Item) -> None:
        """Route a fresh or replayed message: behind its blocked group, into the DLQ behind
        its sidelined group, into a delay level, or on to delivery."""
        group = item.group
        if group is not None:
            if item.kind is Kind.FRESH and self.groups.sidelined(group):
                self._to_dlq(
                    item, item.meta, f"group {group} is sidelined (its head is in the DLQ)"
                )
                return
            if self.groups.blocked(group):
                self._hold(item)
                return
        await self._route(item, self._due(item))

    async def _admit_all(self, items: list[Item]) -> None:
        for item in items:
            await self.admit(item)

    async def _route(self, item: Item, due: int) -> None:
        wait = due - now_ms()
        level = level_for(self.sub.retry.delay_levels_ms, wait) if wait > 0 else None
        if level is None:
            item.not_before_ms = max(due, 0)
            await self.offer(item)
            return
        self.counts["delayed"] += 1
        meta = replace(item.meta, due_ms=due, entered_ms=now_ms())
        if item.group is not None:
            self.groups.add_head(item.group, item.origin)
        source, msg = item.source, item.msg
        self.handoff.submit(
            self.layout.level(level), internal_record(msg, meta), lambda _: source.done(msg)
        )

    def _due(self, item: Item) -> int:
        """When a message not yet attempted may be delivered: its ``X-Deliver-At``, and for
        a delayed subscription its production time plus the delay."""
        if item.kind not in (Kind.FRESH, Kind.RELEASED) or item.meta.attempts:
            return 0
        headers = item.msg.headers  # two lookups by loop: no Envelope for every message
        due = millis(header(headers, DELIVER_AT)) or 0
        if self.sub.delay_ms:
            base = millis(header(headers, PRODUCED_AT))
            due = max(due, (item.msg.timestamp_ms if base is None else base) + self.sub.delay_ms)
        return due

    def _hold(self, item: Item) -> None:
        assert item.group is not None
        group, held = item.group, Held(item)
        self.groups.follow(group, held)
        self.counts["held"] += 1
        record = internal_record(item.msg, replace(item.meta, entered_ms=now_ms()))
        hold = self.sources[self.layout.hold] if self.created else None

        def stored(produced: Produced) -> None:
            source = hold or self.sources[self.layout.hold]
            held.stored = _as_stored(record.value, record.key, record.headers, produced)
            source.track(held.stored)
            item.source.done(item.msg)
            self._release(group)

        self.handoff.submit(self.layout.hold, record, stored)

    def _release(self, group: str) -> None:
        """Let the group's next follower go, if its turn has come."""
        held = self.groups.next_follower(group)
        if held is None or held.stored is None:
            return
        self.groups.take_follower(group)
        stored = held.stored
        meta = RetryMeta.of(stored.headers)
        item = Item(stored, self.sources[self.layout.hold], Kind.RELEASED, group, meta)
        self._spawn(self._route_released(item))

    async def _route_released(self, item: Item) -> None:
        assert item.group is not None
        due = self._due(item)
        if level_for(self.sub.retry.delay_levels_ms, due - now_ms()) is not None:
            self.groups.released(item.group)  # it becomes the group's head
        await self._route(item, due)


def _as_stored(value: bytes, key: bytes | None, headers: Any, produced: Produced) -> Stored:
    return Stored(
        produced.partition, produced.position, produced.timestamp_ms, value, key, tuple(headers)
    )

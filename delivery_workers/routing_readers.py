"""The readers of a subscription's internal topics, on behalf of its :class:`~.routing.Routing`:

- at start, :meth:`InternalReaders.rebuild` reads the group state back from the storage
  (sidelined groups from the DLQ, heads from the levels, followers from the hold topic; see
  :mod:`.groupstate`);
- a reader per delay level waits for its head (FIFO): when the level's delay has passed the
  message is re-routed to the level that fits what is left or, with less left than the
  smallest level, offered for delivery at its due time;
- the replay reader admits unsidelined DLQ entries (their attempts reset) as new messages;
- the DLQ tail follows removals (purge, unsideline) that free sidelined groups.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from core.audit import AuditType
from core.envelope import GROUP_ID, header
from core.retry import level_for
from segments.protocol import Stored
from segments.subscription import dlq
from segments.subscription.retry_meta import RetryMeta, internal_record, origin_partition

from .items import Held, Item, Kind, Source, now_ms, sleep_until

if TYPE_CHECKING:
    from .routing import Routing

_READ_TIMEOUT_S = 1.0


class InternalReaders:
    """See the module doc; one per :class:`~.routing.Routing`, which starts it."""

    def __init__(self, routing: Routing) -> None:
        self.routing = routing
        self._dlq_end = 0
        self._skip: set[tuple[str, int]] = set()  # stale level copies (see rebuild)

    def start(self) -> None:
        r = self.routing
        for ms in r.levels:
            r.spawn(self._level_loop(ms, r.sources[r.layout.level(ms)]))
        r.spawn(self._replay_loop(r.sources[r.layout.replay]))
        r.spawn(self._dlq_tail())

    def mine(self, msg: Stored) -> bool:
        """Whether an internal record belongs to this runner's shard: by its group, else by
        the partition it was first read from."""
        shard = self.routing.shard
        if shard.whole:
            return True
        group = header(msg.headers, GROUP_ID)
        return shard.owns(group, origin_partition(RetryMeta.of(msg.headers).origin))

    async def rebuild(self) -> None:
        """Group state from the storage.

        A crash can leave a message both in the DLQ and, uncommitted, in a level or the hold
        topic (its hand-off was stored, the commit of where it came from was not): the live
        DLQ entry wins, the stale copy is skipped, so a dead-lettered head is not delivered
        behind its group's back."""
        r = self.routing
        store, groups = r.store, r.groups
        view = await dlq.scan(store, r.layout)
        dead = {RetryMeta.of(m.headers).origin for m in view.live()}
        for position, msg in view.entries.items():
            group = header(msg.headers, GROUP_ID)
            if group is not None and self.mine(msg):
                groups.dead_seen(group, position)
        self._dlq_end = view.end
        for ms in r.levels:
            source = r.sources[r.layout.level(ms)]
            for msg in await dlq.read_all(store, source.name, source.tracker.committed(0)):
                origin = RetryMeta.of(msg.headers).origin
                if origin in dead or not self.mine(msg):
                    self._skip.add((source.name, msg.position))
                    continue
                group = header(msg.headers, GROUP_ID)
                if group is not None:
                    groups.add_head(group, origin)
        hold = r.sources[r.layout.hold]
        for msg in await dlq.read_all(store, hold.name, hold.tracker.committed(0)):
            hold.track(msg)
            group = header(msg.headers, GROUP_ID)
            meta = RetryMeta.of(msg.headers)
            if meta.origin in dead or not self.mine(msg):
                hold.done(msg)
                continue
            if group is None:  # cannot happen (only grouped messages are held): deliver
                r.spawn(r.dispatch.offer(Item(msg, hold, Kind.RELEASED, None, meta)))
                continue
            item = Item(msg, hold, Kind.RELEASED, group, meta)
            groups.follow(group, Held(item, stored=msg))

    async def _level_loop(self, ms: int, source: Source) -> None:
        position = source.tracker.committed(0)
        store = self.routing.store
        while True:
            batch = await store.read(
                source.name, 0, position, max_records=200, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                source.track(msg)
                if (source.name, msg.position) in self._skip or not self.mine(msg):
                    source.done(msg)
                    continue
                meta = RetryMeta.of(msg.headers)
                await sleep_until(min(meta.entered_ms + ms, meta.due_ms))  # FIFO: the head
                await self._level_due(msg, source, meta)

    async def _level_due(self, msg: Stored, source: Source, meta: RetryMeta) -> None:
        r = self.routing
        level = level_for(r.sub.retry.delay_levels_ms, meta.due_ms - now_ms())
        if level is not None:  # re-route: what is left still fills a level
            record = internal_record(msg, replace(meta, entered_ms=now_ms()))
            r.handoff.submit(r.layout.level(level), record, lambda _: source.done(msg))
            return
        group = header(msg.headers, GROUP_ID)
        item = Item(msg, source, Kind.DUE, group, meta)
        if meta.due_ms <= now_ms():
            await r.dispatch.offer(item)
        else:  # its group is blocked by it already: wait outside the delivery slots
            r.spawn(self._offer_at(item, meta.due_ms))

    async def _offer_at(self, item: Item, due_ms: int) -> None:
        await sleep_until(due_ms)
        await self.routing.dispatch.offer(item)

    async def _replay_loop(self, source: Source) -> None:
        r = self.routing
        position = source.tracker.committed(0)
        while True:
            batch = await r.store.read(
                source.name, 0, position, max_records=200, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                source.track(msg)
                if not self.mine(msg):  # another shard's
                    source.done(msg)
                    continue
                group = header(msg.headers, GROUP_ID)
                item = Item(msg, source, Kind.REPLAY, group, RetryMeta.of(msg.headers))
                r.audit.message(AuditType.UNSIDELINED, msg)
                await r.admit(item)

    async def _dlq_tail(self) -> None:
        r = self.routing
        position = self._dlq_end
        while True:
            batch = await r.store.read(
                r.layout.dlq, 0, position, max_records=500, timeout=_READ_TIMEOUT_S
            )
            for msg in batch:
                position = msg.position + 1
                if dlq.is_removal(msg):
                    r.groups.dead_removed(dlq.removed_positions(msg))
                    continue
                group = header(msg.headers, GROUP_ID)
                if group is not None and self.mine(msg):
                    r.groups.dead_seen(group, msg.position)

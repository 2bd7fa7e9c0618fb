"""Routing: where a message goes on its way, and where it goes when an attempt is over.

One :class:`Routing` per subscription owns its durable retry path (delay levels, hold topic,
replay, DLQ; see :mod:`segments.subscription`) and the state of its groups
(:mod:`.groupstate`):

- :meth:`Routing.admit` takes a fresh or replayed message: behind its blocked group (hold
  topic), into the DLQ behind its sidelined group, into a delay level (a message that must
  wait *d*: a producer's ``X-Deliver-At`` / ``X-Delay-Ms``, a subscription's ``delay_ms``), or
  on to :class:`~.dispatch.Dispatch`. A message goes to the largest level not longer than its
  wait, with its due time; shorter waits are held in memory while the source position stays
  uncommitted;
- after an attempt (:mod:`.attempt`) it carries out the verdict: :meth:`delivered`,
  :meth:`to_level` (the group's later messages follow it into the hold topic, and are
  released in order after it), :meth:`dead_letter` (the group's followers follow it into the
  DLQ, and the group is *sidelined* until its entries are unsidelined or purged);
- the readers of the internal topics (:mod:`.routing_readers`) bring due heads, released
  followers and replayed entries back through the same routes.

Every hand-off goes through one :class:`~.handoff.HandOff` in order, and the source message
becomes terminal (committable) only when the storage acknowledged the hand-off. Each
subscription has its own readers and writer, so one subscription's retry traffic never holds
up another's.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any, Protocol

from core.audit import AuditType
from core.envelope import DELIVER_AT, MESSAGE_ID, PRODUCED_AT, header, millis
from core.model import Subscription
from core.result import DeliveryResult
from core.retry import ToLevel, level_for
from core.shards import WHOLE, Shard
from metastore.protocol import MetaStore
from segments.protocol import Produced, SegmentStore, Stored
from segments.reader import commit_group
from segments.subscription.layout import Layout, base_name, ensure_layout, load_layout
from segments.subscription.retry_meta import RetryMeta, internal_record

from .audit import SubscriptionAudit
from .commit import AuditBarrier, CommitPolicy
from .dispatch import Dispatch
from .groupstate import GroupStates
from .handoff import HandOff
from .items import Held, Item, Kind, Source, now_ms
from .routing_readers import InternalReaders


class RoutingStats(Protocol):
    held: int
    blocked_groups: int
    delayed: int


class Routing:
    """See the module doc. Open it with :meth:`open`, then :meth:`start` it."""

    def __init__(
        self,
        sub: Subscription,
        meta: MetaStore,
        stores: dict[str, SegmentStore],
        layout: Layout,
        created: bool,
        dispatch: Dispatch,
        audit: SubscriptionAudit,
        policy: CommitPolicy,
        stats: RoutingStats,
        shard: Shard = WHOLE,
    ) -> None:
        self.sub = sub
        self.stats = stats
        self.shard = shard  # every shard reads the shared internal topics, keeps its own
        self.meta = meta
        self.stores = stores
        self.layout = layout
        self.store = stores[layout.cluster]
        self.created = created
        self.dispatch = dispatch
        self.audit = audit
        self.policy = policy
        self.groups: GroupStates[Held] = GroupStates()
        self.handoff = HandOff(self.store, layout.hold)
        self.handoff.prepare = self._create
        self.sources: dict[str, Source] = {}
        self.readers = InternalReaders(self)
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts = {"retried": 0, "dead_lettered": 0, "delayed": 0, "held": 0}

    @classmethod
    async def open(
        cls,
        sub: Subscription,
        meta: MetaStore,
        stores: dict[str, SegmentStore],
        cluster: str,
        dispatch: Dispatch,
        audit: SubscriptionAudit,
        policy: CommitPolicy,
        stats: RoutingStats,
        shard: Shard = WHOLE,
    ) -> Routing:
        """Load the subscription's internal topics (made on first need) and rebuild the
        state of its groups from them."""
        layout = await load_layout(meta, sub)
        created = layout is not None
        if layout is None:
            layout = Layout(cluster, base_name(sub), tuple(sub.retry.delay_levels_ms))
        elif not set(sub.retry.delay_levels_ms) <= set(layout.levels_ms):
            layout = await ensure_layout(meta, stores, sub, cluster)
        routing = cls(sub, meta, stores, layout, created, dispatch, audit, policy, stats, shard)
        if created:
            await routing._open_sources()
            await routing.readers.rebuild()
        return routing

    @property
    def levels(self) -> tuple[int, ...]:
        return self.layout.levels_ms

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
        self.spawn(self.handoff.run())
        if self.created:
            self.start_readers()

    def start_readers(self) -> None:
        self.readers.start()
        for group in self.groups:
            if self.groups.sidelined(group) and not self.groups.has_head(group):
                why = f"follows the dead-lettered messages of group {group}"
                for held in self.groups.take_all_followers(group):
                    self._follower_to_dlq(held, why)
            self._release(group)

    def spawn(self, coro: Awaitable[None]) -> None:
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

    async def commit(self, barrier: AuditBarrier | None = None) -> bool:
        """Commit the internal topics' sources (False if one was held back, see
        :meth:`.items.Source.commit`), and show the group figures."""
        done = True
        for source in list(self.sources.values()):
            done = await source.commit(barrier) and done
        stats = self.stats
        stats.held = self.groups.held()
        stats.blocked_groups = len(self.groups.blocked_groups)
        stats.delayed = self.counts["delayed"]
        return done

    # ------------------------------------------------------------ on the way
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
        await self.route(item, self._due(item))

    async def _admit_all(self, items: list[Item]) -> None:
        for item in items:
            await self.admit(item)

    async def route(self, item: Item, due: int) -> None:
        """On to delivery at ``due`` (epoch ms), or into the level that fits the wait."""
        wait = due - now_ms()
        level = level_for(self.sub.retry.delay_levels_ms, wait) if wait > 0 else None
        if level is None:
            item.not_before_ms = max(due, 0)
            await self.dispatch.offer(item)
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
        self.spawn(self._route_released(item))

    async def _route_released(self, item: Item) -> None:
        assert item.group is not None
        due = self._due(item)
        if level_for(self.sub.retry.delay_levels_ms, due - now_ms()) is not None:
            self.groups.released(item.group)  # it becomes the group's head
        await self.route(item, due)

    # ------------------------------------------------------------ after an attempt
    def delivered(self, item: Item) -> None:
        item.source.done(item.msg)
        self._settle(item)

    def _settle(self, item: Item) -> None:
        """The item left the group's blocking: a head is done, a release is over."""
        group = item.group
        if group is None:
            return
        if item.kind is Kind.DUE:
            self.groups.drop_head(group, item.origin)
        elif item.kind is Kind.RELEASED:
            self.groups.released(group)
        self._release(group)

    def to_level(
        self,
        item: Item,
        result: DeliveryResult,
        attempt: int,
        verdict: ToLevel,
        drained: list[Item],
    ) -> None:
        """Hand ``item`` to the delay level of ``verdict``; ``drained`` (its group's items
        queued behind it) follow it into the hold topic."""
        now = now_ms()
        meta = replace(
            _failed(item.meta, result, attempt, now), due_ms=now + verdict.wait_ms, entered_ms=now
        )
        if item.group is not None:
            if item.kind is Kind.RELEASED:
                self.groups.released(item.group)
            self.groups.add_head(item.group, item.origin)
        source, msg = item.source, item.msg
        self.handoff.submit(
            self.layout.level(verdict.level_ms),
            internal_record(msg, meta),
            lambda _: source.done(msg),
        )
        self.counts["retried"] += 1
        self.audit.message(
            AuditType.RETRIED,
            msg,
            attempt=attempt,
            status=result.status,
            error=result.error,
            due_at_ms=meta.due_ms,
            level_ms=verdict.level_ms,
        )
        for follower in drained:
            self._hold(follower)

    def dead_letter(
        self, item: Item, result: DeliveryResult, attempt: int, drained: list[Item]
    ) -> None:
        """``item`` failed for good: to the DLQ, and on a grouped topic its group's held and
        queued messages after it, in order."""
        meta = _failed(item.meta, result, attempt, now_ms())
        group = item.group
        if group is not None:
            if item.kind is Kind.DUE:
                self.groups.drop_head(group, item.origin)
            elif item.kind is Kind.RELEASED:
                self.groups.released(group)
        if not self.sub.dlq_enabled:  # the operator chose to drop: say so, go on
            item.source.done(item.msg)
            self.audit.message(
                AuditType.DEAD_LETTERED,
                item.msg,
                attempt=attempt,
                status=result.status,
                error=f"discarded (the subscription has no DLQ): {result.error}",
            )
            if group is not None:
                self._release(group)
            self.spawn(self._admit_all(drained))
            return
        self._to_dlq(item, meta, None)
        if group is None:
            return
        why = f"follows {header(item.msg.headers, MESSAGE_ID)} of group {group} to the DLQ"
        for held in self.groups.take_all_followers(group):
            self._follower_to_dlq(held, why)
        for follower in drained:
            self._to_dlq(follower, follower.meta, why)

    def _to_dlq(self, item: Item, meta: RetryMeta, why: str | None) -> None:
        now = now_ms()
        if why is not None:  # never attempted here: it follows its group
            meta = replace(
                meta,
                first_failed_ms=meta.first_failed_ms or now,
                last_failed_ms=now,
                last_error=why,
            )
        group, source, msg = item.group, item.source, item.msg
        if group is not None:
            self.groups.dead_letter_started(group)

        def stored(produced: Produced) -> None:
            if group is not None:
                self.groups.dead_lettered(group, produced.position)
            source.done(msg)

        self.handoff.submit(self.layout.dlq, internal_record(msg, meta), stored)
        self.counts["dead_lettered"] += 1
        self.audit.message(
            AuditType.DEAD_LETTERED,
            msg,
            attempt=meta.attempts,
            status=meta.last_status,
            error=meta.last_error,
        )

    def _follower_to_dlq(self, held: Held, why: str) -> None:
        """A held follower (acknowledged by the hold topic or not yet: the hold write is
        ahead in the hand-off order, so it is stored before this one)."""
        held.dead = True
        item = held.item
        if held.stored is not None:
            item = Item(
                held.stored,
                self.sources[self.layout.hold],
                Kind.RELEASED,
                item.group,
                RetryMeta.of(held.stored.headers),
            )
            self._to_dlq(item, item.meta, why)
            return
        now = now_ms()
        meta = replace(item.meta, first_failed_ms=now, last_failed_ms=now, last_error=why)
        group = item.group
        assert group is not None
        self.groups.dead_letter_started(group)

        def stored(produced: Produced) -> None:
            self.groups.dead_lettered(group, produced.position)
            assert held.stored is not None  # the hold write was acknowledged before
            self.sources[self.layout.hold].done(held.stored)

        self.handoff.submit(self.layout.dlq, internal_record(item.msg, meta), stored)
        self.counts["dead_lettered"] += 1
        self.audit.message(AuditType.DEAD_LETTERED, item.msg, attempt=0, error=why)


def _failed(meta: RetryMeta, result: DeliveryResult, attempt: int, now: int) -> RetryMeta:
    return replace(
        meta,
        attempts=attempt,
        first_failed_ms=meta.first_failed_ms or now,
        last_failed_ms=now,
        last_status=result.status,
        last_error=result.error,
    )


def _as_stored(value: bytes, key: bytes | None, headers: Any, produced: Produced) -> Stored:
    return Stored(
        produced.partition, produced.position, produced.timestamp_ms, value, key, tuple(headers)
    )

"""The retry path: where a message goes when it must wait, fails, or follows its group.

One :class:`RetryPath` per subscription moves messages into its internal topics
(:mod:`.internal_topics`: delay levels, hold topic, DLQ) and keeps the state of its groups
(:mod:`.groupstate`). It is told what to do, and tells nobody back:

- on the way (from :mod:`.admission`): :meth:`RetryPath.delay` (a message that must wait
  goes to the largest level not longer than its wait, with its due time), :meth:`hold`
  (behind its blocked group), :meth:`to_dlq` (behind its sidelined group);
- after an attempt (from :mod:`.dispatch`, which alone carries out an attempt's verdict):
  :meth:`delivered`, :meth:`to_level` (the group's later messages follow it into the hold
  topic, and are released in order after it), :meth:`dead_letter` (the group's followers
  follow it into the DLQ, and the group is *sidelined* until its entries are unsidelined
  or purged);
- from the readers of its topics (:mod:`.retry_readers`): :meth:`relevel` (a level's head
  whose wait still fills a shorter level) and :meth:`sweep` (at start).

Every hand-off goes through one :class:`~.handoff.HandOff` in order, with a value that says
what its storage makes terminal; :meth:`run` carries those out as the storage acknowledges
them: only then is the source message terminal (committable). A follower whose turn has
come, and a group's messages to admit again, are put on :attr:`RetryPath.returns`, which
the readers take up: the retry path never routes a message itself.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from typing import Protocol

from core.audit import AuditType
from core.envelope import MESSAGE_ID, header
from core.model import Subscription
from core.result import DeliveryResult
from core.retry import ToLevel
from segments.protocol import Produced, Record, Stored
from segments.subscription.retry_meta import RetryMeta, internal_record

from .audit import SubscriptionAudit
from .groupstate import GroupStates
from .handoff import HandOff
from .internal_topics import InternalTopics
from .items import Held, Item, Kind, Source, now_ms
from .tracking import AuditBarrier


class RetryStats(Protocol):
    held: int
    blocked_groups: int
    delayed: int
    sidelined: int  # into the DLQ unattempted, behind the group's failed head


@dataclass(frozen=True, slots=True)
class Return:
    """Messages the retry path gives back to be routed: a ``released`` follower of the hold
    topic (whose turn came), else a group's messages to admit again, in order."""

    items: list[Item]
    released: bool


@dataclass(frozen=True, slots=True)
class _Done:  # stored in a level: the message is terminal where it was read
    source: Source
    msg: Stored


@dataclass(frozen=True, slots=True)
class _Held:  # a follower stored in the hold topic
    held: Held
    record: Record


@dataclass(frozen=True, slots=True)
class _Dead:  # stored in the DLQ: its group is sidelined by it
    group: str | None
    source: Source
    msg: Stored


@dataclass(frozen=True, slots=True)
class _FollowerDead:  # a held follower stored in the DLQ behind its head
    group: str
    held: Held


Acknowledged = _Done | _Held | _Dead | _FollowerDead
_COUNTS = ("retried", "dead_lettered", "delayed", "held")


@dataclass(eq=False)
class RetryPath:
    """See the module doc; :meth:`run` carries out the stored hand-offs until cancelled."""

    sub: Subscription
    topics: InternalTopics
    groups: GroupStates[Held]
    audit: SubscriptionAudit
    stats: RetryStats
    returns: asyncio.Queue[Return] = field(init=False, default_factory=asyncio.Queue)
    counts: dict[str, int] = field(init=False, default_factory=lambda: dict.fromkeys(_COUNTS, 0))

    def __post_init__(self) -> None:
        self.handoff: HandOff[Acknowledged] = HandOff(self.topics)

    async def run(self) -> None:
        while True:
            for then, produced in await self.handoff.stored():
                self._stored(then, produced)

    def _stored(self, then: Acknowledged, produced: Produced) -> None:
        """A hand-off is stored: what it makes terminal, and what may go on now."""
        if isinstance(then, _Done):
            then.source.done(then.msg)
        elif isinstance(then, _Held):
            held, record, item = then.held, then.record, then.held.item
            assert item.group is not None
            held.stored = _as_stored(record, produced)
            self.topics.hold.track(held.stored)
            item.source.done(item.msg)
            self.release(item.group)
        elif isinstance(then, _Dead):
            if then.group is not None:
                self.groups.dead_lettered(then.group, produced.position)
            then.source.done(then.msg)
        else:
            self.groups.dead_lettered(then.group, produced.position)
            assert then.held.stored is not None  # the hold write was acknowledged before
            self.topics.hold.done(then.held.stored)

    async def commit(self, barrier: AuditBarrier | None = None) -> bool:
        """Commit the internal topics' sources (False if one was held back), and show the
        group figures."""
        done = await self.topics.commit(barrier)
        stats = self.stats
        stats.held = self.groups.held()
        stats.blocked_groups = len(self.groups.blocked_groups)
        stats.delayed = self.counts["delayed"]
        return done

    def sweep(self) -> None:
        """Once the topics' readers start: a sidelined group with no head sends its
        followers to the DLQ, and every group's next follower whose turn came goes."""
        for group in self.groups:
            if self.groups.sidelined(group) and not self.groups.has_head(group):
                why = f"follows the dead-lettered messages of group {group}"
                for held in self.groups.take_all_followers(group):
                    self._follower_to_dlq(held, why)
            self.release(group)

    # ------------------------------------------------------------ on the way
    def delay(self, item: Item, due: int, level: int) -> None:
        """Into ``level`` until ``due`` (epoch ms); the group waits behind it."""
        self.counts["delayed"] += 1
        meta = replace(item.meta, due_ms=due, entered_ms=now_ms())
        if item.group is not None:
            self.groups.add_head(item.group, item.origin)
        record = internal_record(item.msg, meta)
        self.handoff.submit(self.topics.layout.level(level), record, _Done(item.source, item.msg))

    def relevel(self, msg: Stored, source: Source, meta: RetryMeta, level: int) -> None:
        """A level's head whose remaining wait still fills ``level``: on into it."""
        record = internal_record(msg, replace(meta, entered_ms=now_ms()))
        self.handoff.submit(self.topics.layout.level(level), record, _Done(source, msg))

    def hold(self, item: Item) -> None:
        """Behind its blocked group, in the hold topic."""
        assert item.group is not None
        held = Held(item)
        self.groups.follow(item.group, held)
        self.counts["held"] += 1
        record = internal_record(item.msg, replace(item.meta, entered_ms=now_ms()))
        self.handoff.submit(self.topics.layout.hold, record, _Held(held, record))

    def release(self, group: str) -> None:
        """Let the group's next follower go, if its turn has come."""
        held = self.groups.next_follower(group)
        if held is None or held.stored is None:
            return
        self.groups.take_follower(group)
        stored = held.stored
        item = Item(stored, self.topics.hold, Kind.RELEASED, group, RetryMeta.of(stored.headers))
        self.returns.put_nowait(Return([item], released=True))

    # ------------------------------------------------------------ after an attempt
    def delivered(self, item: Item) -> None:
        item.source.done(item.msg)
        group = item.group  # it left the group's blocking: a head is done, a release over
        if group is None:
            return
        if item.kind is Kind.DUE:
            self.groups.drop_head(group, item.origin)
        elif item.kind is Kind.RELEASED:
            self.groups.released(group)
        self.release(group)

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
        self.handoff.submit(
            self.topics.layout.level(verdict.level_ms),
            internal_record(item.msg, meta),
            _Done(item.source, item.msg),
        )
        self.counts["retried"] += 1
        self.audit.message(
            AuditType.RETRIED,
            item.msg,
            attempt=attempt,
            status=result.status,
            error=result.error,
            due_at_ms=meta.due_ms,
            level_ms=verdict.level_ms,
        )
        for follower in drained:
            self.hold(follower)

    def dead_letter(
        self, item: Item, result: DeliveryResult, attempt: int, drained: list[Item]
    ) -> int:
        """``item`` failed for good: to the DLQ, and on a grouped topic its group's held and
        queued messages after it, in order; how many followed it (sidelined unattempted)."""
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
                self.release(group)
            self.returns.put_nowait(Return(drained, released=False))
            return 0
        self.to_dlq(item, meta, None)
        if group is None:
            return 0
        why = f"follows {header(item.msg.headers, MESSAGE_ID)} of group {group} to the DLQ"
        held = self.groups.take_all_followers(group)
        for follower_held in held:
            self._follower_to_dlq(follower_held, why)
        for follower in drained:
            self.to_dlq(follower, follower.meta, why)
        return len(held) + len(drained)

    def to_dlq(self, item: Item, meta: RetryMeta, why: str | None) -> None:
        """Into the DLQ; ``why`` it goes there unattempted (it follows its group), if so."""
        now = now_ms()
        if why is not None:  # never attempted here: it follows its group
            self.stats.sidelined += 1
            meta = replace(
                meta,
                first_failed_ms=meta.first_failed_ms or now,
                last_failed_ms=now,
                last_error=why,
            )
        if item.group is not None:
            self.groups.dead_letter_started(item.group)
        dead = _Dead(item.group, item.source, item.msg)
        self.handoff.submit(self.topics.layout.dlq, internal_record(item.msg, meta), dead)
        self.counts["dead_lettered"] += 1
        self.audit.message(
            AuditType.DEAD_LETTERED,
            item.msg,
            attempt=meta.attempts,
            status=meta.last_status,
            error=meta.last_error,
        )

    def _follower_to_dlq(self, held: Held, why: str) -> None:
        """A held follower (acknowledged by the hold topic or not yet: the hold write is
        ahead in the hand-off order, so it is stored before this one)."""
        held.dead = True
        item = held.item
        if held.stored is not None:  # to_dlq counts it
            meta = RetryMeta.of(held.stored.headers)
            stored = Item(held.stored, self.topics.hold, Kind.RELEASED, item.group, meta)
            self.to_dlq(stored, meta, why)
            return
        now = now_ms()
        self.stats.sidelined += 1
        meta = replace(item.meta, first_failed_ms=now, last_failed_ms=now, last_error=why)
        group = item.group
        assert group is not None
        self.groups.dead_letter_started(group)
        record = internal_record(item.msg, meta)
        self.handoff.submit(self.topics.layout.dlq, record, _FollowerDead(group, held))
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


def _as_stored(record: Record, produced: Produced) -> Stored:
    return Stored(
        produced.partition,
        produced.position,
        produced.timestamp_ms,
        record.value,
        record.key,
        tuple(record.headers),
    )

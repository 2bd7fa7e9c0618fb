"""What becomes of a delivery that ended: delivered, to a delay level, or to the DLQ (with
its group's followers). The half of :class:`~.retrypath.RetryPath` that reacts to outcomes;
the routing half (readers, rebuild, admit, hold, release) lives in :mod:`.retrypath`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from core.audit import AuditType
from core.envelope import MESSAGE_ID, header
from core.model import Subscription
from core.result import DeliveryResult
from core.retry import ToLevel
from segments.internal import Layout, RetryMeta, internal_record
from segments.protocol import Produced

from .groupstate import GroupStates
from .handoff import HandOff
from .items import Held, Item, Kind, Source, now_ms


class Outcomes:
    """Outcome handling; the attributes and the routing hooks are the retry path's."""

    sub: Subscription
    layout: Layout
    groups: GroupStates[Held]
    handoff: HandOff
    sources: dict[str, Source]
    counts: dict[str, int]
    audit: Callable[..., None]

    @property
    def levels(self) -> tuple[int, ...]:
        return self.layout.levels_ms

    def _release(self, group: str) -> None:
        raise NotImplementedError

    def _hold(self, item: Item) -> None:
        raise NotImplementedError

    def _spawn(self, coro: Awaitable[None]) -> None:
        raise NotImplementedError

    async def _admit_all(self, items: list[Item]) -> None:
        raise NotImplementedError

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

    def retry(
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
        level = verdict.level_ms
        if item.group is not None:
            if item.kind is Kind.RELEASED:
                self.groups.released(item.group)
            self.groups.add_head(item.group, item.origin)
        source, msg = item.source, item.msg
        self.handoff.submit(
            self.layout.level(level), internal_record(msg, meta), lambda _: source.done(msg)
        )
        self.counts["retried"] += 1
        self.audit(
            AuditType.RETRIED, msg, attempt=attempt, status=result.status, error=result.error
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
            self.audit(
                AuditType.DEAD_LETTERED,
                item.msg,
                attempt=attempt,
                status=result.status,
                error=f"discarded (the subscription has no DLQ): {result.error}",
            )
            if group is not None:
                self._release(group)
            self._spawn(self._admit_all(drained))
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
        self.audit(
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
        self.audit(AuditType.DEAD_LETTERED, item.msg, attempt=0, error=why)


def _failed(meta: RetryMeta, result: DeliveryResult, attempt: int, now: int) -> RetryMeta:
    return replace(
        meta,
        attempts=attempt,
        first_failed_ms=meta.first_failed_ms or now,
        last_failed_ms=now,
        last_status=result.status,
        last_error=result.error,
    )

"""Admission: where a message goes on its way to delivery.

:meth:`Admission.admit` takes a fresh message (from :mod:`.intake`) or a replayed one (from
:mod:`.retry_readers`) and sends it one way, once:

- into the DLQ behind its sidelined group, or into the hold topic behind its blocked group
  (the retry path, :mod:`.retry_path`);
- into a delay level when it must wait *d* (a producer's ``X-Deliver-At`` /
  ``X-Delay-Ms``, a subscription's ``delay_ms``): the largest level not longer than its
  wait, with its due time; a wait shorter than every level is held in memory (the item's
  ``not_before_ms``) while the source position stays uncommitted;
- else on to :class:`~.dispatch.Dispatch`.

:meth:`Admission.route_released` does the same for a follower the hold topic released.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.envelope import DELIVER_AT, PRODUCED_AT, header, millis
from core.model import Subscription
from core.retry import level_for

from .dispatch import Dispatch
from .groupstate import GroupStates
from .items import Held, Item, Kind, now_ms
from .retry_path import RetryPath


@dataclass(eq=False)
class Admission:
    """See the module doc. It asks the group state; only the retry path changes it."""

    sub: Subscription
    groups: GroupStates[Held]
    path: RetryPath
    dispatch: Dispatch

    async def admit(self, item: Item) -> None:
        """Route a fresh or replayed message: behind its blocked group, into the DLQ behind
        its sidelined group, into a delay level, or on to delivery."""
        group = item.group
        if group is not None:
            if item.kind is Kind.FRESH and self.groups.sidelined(group):
                why = f"group {group} is sidelined (its head is in the DLQ)"
                self.path.to_dlq(item, item.meta, why)
                return
            if self.groups.blocked(group):
                self.path.hold(item)
                return
        await self._route(item, self._due(item))

    async def admit_all(self, items: list[Item]) -> None:
        for item in items:
            await self.admit(item)

    async def route_released(self, item: Item) -> None:
        """A follower released from the hold topic: on to delivery, or into the level its
        wait fills (it becomes its group's head)."""
        assert item.group is not None
        due = self._due(item)
        if level_for(self.sub.retry.delay_levels_ms, due - now_ms()) is not None:
            self.groups.released(item.group)  # it becomes the group's head
        await self._route(item, due)

    async def _route(self, item: Item, due: int) -> None:
        """On to delivery at ``due`` (epoch ms), or into the level that fits the wait."""
        wait = due - now_ms()
        level = level_for(self.sub.retry.delay_levels_ms, wait) if wait > 0 else None
        if level is None:
            item.not_before_ms = max(due, 0)
            await self.dispatch.offer(item)
            return
        self.path.delay(item, due, level)

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

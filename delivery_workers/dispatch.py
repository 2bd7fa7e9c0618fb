"""Dispatch: which queued message is attempted next, and when.

Messages wait in the subscription's :class:`~.groups.GroupScheduler`: one in flight per
group, in order, across groups in parallel, up to ``max_in_flight``; :meth:`Dispatch.offer`
waits while it is full (the readers' back-pressure). :meth:`Dispatch.run` starts an attempt
for each message the scheduler lets go, at most ``rate_limit_per_second``, and none while the
circuit is open (:class:`~.throttle.Throttle`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

from core.model import Subscription
from core.shards import WHOLE, Shard
from core.token_bucket import TokenBucket
from segments.audit import AuditSink

from .groups import GroupScheduler, Outcome
from .items import Item
from .throttle import CircuitStats, Throttle

Start = Callable[[Item], Coroutine[Any, Any, None]]


class Dispatch:
    """The scheduler, the circuit's throttle and the rate limit of one subscription."""

    def __init__(
        self,
        sub: Subscription,
        stats: CircuitStats,
        audit: AuditSink | None,
        in_flight_cap: int | None = None,
        shard: Shard = WHOLE,
    ) -> None:
        # The worker's cap keeps one subscription from holding every connection of the
        # sender's pool (a slow endpoint, a 15-minute timeout): see Worker.
        limit = min(sub.max_in_flight, in_flight_cap or sub.max_in_flight)
        self.scheduler: GroupScheduler[Item] = GroupScheduler(
            max_in_flight=limit, max_buffered=max(1_000, 4 * limit)
        )
        self.throttle = Throttle.for_subscription(sub, stats, audit, shard)  # circuit breaker
        self._rate = TokenBucket(sub.rate_limit_per_second) if sub.rate_limit_per_second else None
        self._changed = asyncio.Event()  # something became ready, terminal or free
        self.attempts: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None  # the first attempt that raised
        self._failed = asyncio.Event()

    def wake(self) -> None:
        self._changed.set()

    async def wait_change(self, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._changed.wait()
        self._changed.clear()

    async def offer(self, item: Item) -> None:
        """Queue ``item`` behind its group, waiting while the scheduler is full."""
        while not self.scheduler.offer(item.group, item):
            await self.wait_change(1.0)
        self._changed.set()

    async def run(self, start: Start) -> None:
        """Start ``start(item)`` for every item let go, until cancelled."""
        while True:
            await self.throttle.gate()  # the circuit is open: start no new delivery
            item = self.scheduler.next_ready()
            if item is None:
                await self.wait_change(1.0)
                continue
            if self._rate is not None:
                while (wait := self._rate.take()) > 0:
                    await asyncio.sleep(wait)
            task = asyncio.create_task(start(item))
            self.attempts.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.attempts.discard(task)
        if task.cancelled() or task.exception() is None or self._failure is not None:
            return
        self._failure = task.exception()
        self._failed.set()

    async def failures(self) -> None:
        """Raise the error of the first attempt that raised (its message stays in flight, so
        the runner must start over), waiting until one does."""
        await self._failed.wait()
        assert self._failure is not None
        raise self._failure

    def done(self, item: Item) -> None:
        """``item`` was delivered: the next of its group may go."""
        self.scheduler.completed(item, Outcome.DONE)

    def stop_group(self, item: Item) -> list[Item]:
        """``item`` leaves for a level or the DLQ: free its slot and return the items of its
        group queued behind it (in order), which must follow it."""
        if item.group is None:
            self.scheduler.completed(item, Outcome.DONE)
            return []
        self.scheduler.completed(item, Outcome.BLOCKED)
        drained = self.scheduler.drain(item.group)
        self.scheduler.release(item.group)
        return drained

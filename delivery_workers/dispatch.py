"""Dispatch: which queued message is attempted next, and when.

Messages wait in the subscription's :class:`~.scheduler.GroupScheduler`: one in flight per
group, in order, across groups in parallel, up to ``max_in_flight``; :meth:`Dispatch.offer`
waits while it is full (the readers' back-pressure). :meth:`Dispatch.run` starts an attempt
for each message the scheduler lets go, at most ``rate_limit_per_second``, and none while the
circuit is open (:class:`~.throttle.Throttle`). A subscription with ``batch`` set runs
:meth:`Dispatch.run_batches` instead: it gathers what the scheduler lets go into batches (see
there) and starts one attempt per batch.

An attempt (:mod:`.attempt`, :mod:`.batch_attempt`) returns its verdict on each message as a
value (:class:`~.attempt.Finished`); the dispatch alone carries it out: the message's slot is
freed (delivered: the next of its group may go; to a level or the DLQ: its group's queued
messages follow it), and the retry path (:mod:`.retry_path`) is told where it goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

from core.model import BatchPolicy, Subscription
from core.retry import Delivered, ToLevel
from core.shards import WHOLE, Shard
from core.token_bucket import TokenBucket
from segments.audit import AuditSink

from .attempt import POISONED, Attempts, Finished
from .batch_attempt import BatchAttempts
from .items import Item
from .poison import crash_names
from .progress import Progress
from .retry_path import RetryPath
from .scheduler import Completion, GroupScheduler
from .throttle import CircuitStats, Throttle


class Dispatch:
    """The scheduler, the circuit's throttle and the rate limit of one subscription."""

    def __init__(
        self,
        sub: Subscription,
        stats: CircuitStats,
        audit: AuditSink | None,
        progress: Progress,
        in_flight_cap: int | None = None,
        shard: Shard = WHOLE,
    ) -> None:
        # The worker's cap keeps one subscription from holding every connection of the
        # sender's pool (a slow endpoint, a 15-minute timeout): see Worker.
        limit = self.max_requests = min(sub.max_in_flight, in_flight_cap or sub.max_in_flight)
        # Batched, max_in_flight counts requests: each may carry a full batch.
        messages = limit * (sub.batch.max_messages if sub.batch is not None else 1)
        self.scheduler: GroupScheduler[Item] = GroupScheduler(
            max_in_flight=messages, max_buffered=max(1_000, 4 * messages)
        )
        self.throttle = Throttle.for_subscription(sub, stats, audit, shard)  # circuit breaker
        self._rate = TokenBucket(sub.rate_limit_per_second) if sub.rate_limit_per_second else None
        self.progress = progress  # something became ready, terminal or free
        self.attempts: set[asyncio.Task[None]] = set()
        self._failure: BaseException | None = None  # the first attempt that raised
        self._failed = asyncio.Event()

    async def offer(self, item: Item) -> None:
        """Queue ``item`` behind its group, waiting while the scheduler is full."""
        while not self.scheduler.offer(item.group, item):
            await self.progress.wait(1.0)
        self.progress.wake()

    async def run(self, attempts: Attempts, path: RetryPath) -> None:
        """Attempt every item let go, and carry out its verdict through ``path``, until
        cancelled."""
        while True:
            await self.throttle.gate()  # the circuit is open: start no new delivery
            item = self.scheduler.next_ready()
            if item is None:
                await self.progress.wait(self._idle_wait())
                continue
            await self._launch(partial(self._attempt, attempts, path, item))

    async def run_batches(
        self, batches: BatchAttempts, path: RetryPath, policy: BatchPolicy
    ) -> None:
        """Attempt every batch gathered, and carry out each message's verdict through
        ``path``, until cancelled.

        A batch takes what the scheduler lets go, in its order, until it holds
        ``max_messages`` messages or ``max_bytes`` of payload (a message that would pass the
        bound opens the next batch; one larger than it goes alone), or ``max_wait_ms`` passed
        since its first message. The scheduler lets one message of a group go at a time, so a
        batch holds at most one message per group, and a group's next message goes in a later
        batch, once this one is terminal: group order holds within and across batches. At most
        ``max_in_flight`` batches are in flight; the rate limit counts requests."""
        loop = asyncio.get_running_loop()
        carried: Item | None = None  # let go, past the last batch's bound: the next one's first
        while True:
            await self.throttle.gate()
            if len(self.attempts) >= self.max_requests:
                await self.progress.wait(1.0)
                continue
            first = carried or self.scheduler.next_ready()
            carried = None
            if first is None:
                await self.progress.wait(self._idle_wait())
                continue
            batch, size = [first], len(first.msg.value)
            deadline = loop.time() + policy.max_wait_ms / 1000
            while len(batch) < policy.max_messages:
                item = self.scheduler.next_ready()
                if item is None:
                    remaining = deadline - loop.time()
                    if remaining <= 0:
                        break
                    await self.progress.wait(remaining)
                    continue
                if size + len(item.msg.value) > policy.max_bytes:
                    carried = item
                    break
                batch.append(item)
                size += len(item.msg.value)
            await self._launch(partial(self._attempt_batch, batches, path, batch))

    def _idle_wait(self) -> float | None:
        """How long to wait for an item to become ready: with none held, only an
        :meth:`offer` can make one, and it wakes ``progress``; so an idle subscription waits
        on no timer (one a second for each of 2 000 idle runners was a tenth of an idle
        worker's event loop, bench/idle_subs.py under py-spy). With items held (a group
        blocked, the in-flight limit reached), a second at most, as before."""
        return None if self.scheduler.buffered == 0 else 1.0

    async def _launch(self, attempt: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Start ``attempt`` once the rate limit lets one more request go (counted in
        flight until it ends)."""
        if self._rate is not None:
            while (wait := self._rate.take()) > 0:
                await asyncio.sleep(wait)
        task = asyncio.create_task(attempt())
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

    async def _attempt(self, attempts: Attempts, path: RetryPath, item: Item) -> None:
        """One message's attempt, then its verdict; a failure of the worker on the way is
        the :class:`~.poison.MessageCrashed` of the message."""
        try:
            with crash_names(item.origin):
                self._carry_out(await attempts.run(item), path)
        finally:
            self.progress.wake()

    async def _attempt_batch(
        self, batches: BatchAttempts, path: RetryPath, batch: list[Item]
    ) -> None:
        """One batch's attempt; each message's verdict is carried out as it comes."""
        try:
            async for finished in batches.run(batch):
                with crash_names(finished.item.origin):  # a failure here is this message's
                    self._carry_out(finished, path)
        finally:
            self.progress.wake()

    def _carry_out(self, finished: Finished, path: RetryPath) -> None:
        """Move the message on as its verdict says: delivered (the next of its group may
        go), or to a level or the DLQ, its group's queued messages after it."""
        item, verdict = finished.item, finished.verdict
        if isinstance(verdict, Delivered):
            self.scheduler.completed(item, Completion.DONE)
            path.delivered(item)
            return
        drained = self._stop_group(item)
        if isinstance(verdict, ToLevel):
            path.to_level(item, finished.result, finished.attempt, verdict, drained)
            return
        followers = path.dead_letter(item, finished.result, finished.attempt, drained)
        if verdict is not POISONED:  # the worker failed on it, not the endpoint
            # Its group's messages that follow it unattempted count against the circuit
            # too (.throttle: few heads, few calls, yet everything fails).
            self.throttle.sidelined(followers, finished.result)

    def _stop_group(self, item: Item) -> list[Item]:
        """``item`` leaves for a level or the DLQ: free its slot and return the items of its
        group queued behind it (in order), which must follow it."""
        if item.group is None:
            self.scheduler.completed(item, Completion.DONE)
            return []
        self.scheduler.completed(item, Completion.BLOCKED)
        drained = self.scheduler.drain(item.group)
        self.scheduler.release(item.group)
        return drained

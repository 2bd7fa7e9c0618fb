"""Flushing a subscription's commits: :class:`Committer` writes, when
the :class:`~.tracking.CommitPolicy` says it is due, the positions below which every message
of each source is terminal (:class:`~.tracking.CommitTracker`), after the audit events of
those messages are durable.

**A failed commit is not a failure of the runner.** The storage being away (a frozen broker)
fails commits, but the runner's positions are in memory and only move forward: it delivers
on, and the next commit carries a newer or equal position that supersedes the failed one.
Restarting instead made 500 runners re-read their positions at once as the broker woke
(tests/chaos/test_frozen_broker.py: 15-32 s to resume). A crash meanwhile delivers again from
the last commit that succeeded: at-least-once, as ever. Failures are counted
(``failed_commits``), the time since the first of a run of them kept
(``commit_failing_since_ms``) and logged at most every ``FAILURE_LOG_S``."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from core.errors import StorageUnavailable

from .tracking import AuditBarrier, CommitPolicy

log = logging.getLogger(__name__)
COMMIT_DRAIN_S = 5.0  # how long a stopping runner waits for the commit it has under way
FAILURE_LOG_S = 10.0  # failed commits are logged at most this often (over every runner)
SETTLE_RETRY_S = 1.0  # between the attempts of a commit that must land (:meth:`settle`)


class Committable(Protocol):
    async def commit(self, barrier: AuditBarrier | None = None) -> bool: ...


class CommitStats(Protocol):
    failed_commits: int
    commit_failing_since_ms: int | None


class Committer:
    """Commits a subscription's sources when :class:`CommitPolicy` says it is due: the
    consume segment's (``main``, set by the intake) and the retry path's.

    A commit runs on even if its caller is cancelled, and a stopping runner waits for it
    (:meth:`drain`): a commit that reached the storage after the next owner had started would
    move its position back (the storage does not order two clients' commits), leaving a lag
    that nothing commits away."""

    def __init__(
        self,
        policy: CommitPolicy,
        name: str,
        retry_path: Committable,
        barrier: AuditBarrier | None = None,
        stats: CommitStats | None = None,
    ) -> None:
        self.policy = policy
        self.stats = stats
        self.name = name
        self.retry_path = retry_path
        self.barrier = barrier  # the audit sink: events before positions (see _commit_now)
        self.main: Committable | None = None
        # Segments a failover left behind, read beside the consume segment (available mode).
        self.behind: list[Committable] = []
        self._committing: asyncio.Future[None] | None = None
        # One commit at a time: positions taken later are written later (never overtaken).
        self._one_at_a_time = asyncio.Lock()

    async def run(self) -> None:
        """Commit whenever due, until cancelled; a failed commit is reported, and the next
        one supersedes it (see the module doc)."""
        while True:
            wait = self.policy.wait_s()
            if wait is None:  # nothing waits: sleep until something does, not poll
                await self.policy.until_waiting()
                continue
            await asyncio.sleep(max(wait, 0.01))
            if self.policy.due():
                await self.try_commit()

    async def try_commit(self) -> bool:
        """:meth:`commit`; False if the storage was away (reported, not raised)."""
        try:
            await self.commit()
        except StorageUnavailable as exc:
            self._failed(exc)
            return False
        if self.stats is not None:
            self.stats.commit_failing_since_ms = None
        return True

    async def settle(self) -> None:
        """Commit what is terminal now, again until it lands (a sealed segment is passed only
        once fully committed)."""
        while not await self.try_commit():
            await asyncio.sleep(SETTLE_RETRY_S)

    async def commit(self) -> None:
        """Commit what is terminal now (see the class doc); raises if it failed."""
        self._committing = asyncio.ensure_future(self._commit_in_turn())
        self._committing.add_done_callback(_retrieved)
        await asyncio.shield(self._committing)

    async def drain(self) -> None:
        """Wait (a bounded time) for a commit under way."""
        pending = self._committing
        if pending is None or pending.done():
            return
        try:
            async with asyncio.timeout(COMMIT_DRAIN_S):
                await asyncio.shield(pending)
        except Exception as exc:  # the storage is away: the next owner commits again
            log.warning("%s: the last commit did not finish: %r", self.name, exc)

    def _failed(self, exc: StorageUnavailable) -> None:
        if self.stats is not None:
            self.stats.failed_commits += 1
            if self.stats.commit_failing_since_ms is None:
                self.stats.commit_failing_since_ms = int(time.time() * 1000)
        _FAILURES.report(self.name, exc)

    async def _commit_in_turn(self) -> None:
        async with self._one_at_a_time:
            await self._commit_now()

    async def _commit_now(self) -> None:
        # A new batch starts before the positions are taken: what becomes terminal while
        # this commit is on the wire waits for the next one. (Starting it after the write
        # left the last messages of a burst uncommitted until more came: the lag that never
        # reached 0 on Pulsar, whose commits are slow REST calls.)
        #
        # Each source takes its positions, then waits until the audit events emitted before
        # that are durable, then writes them: a crash after the commit loses no event of a
        # message below it. While the audit topic cannot be written nothing is committed
        # (deliveries go on; a restart would deliver again what is uncommitted).
        self.policy.flushed()
        try:
            done = True
            if self.main is not None:
                done = await self.main.commit(self.barrier)
            for source in list(self.behind):
                done = await source.commit(self.barrier) and done
            done = await self.retry_path.commit(self.barrier) and done
        except BaseException:
            self.policy.record()  # not written: due again at the next round
            raise
        if not done:
            log.warning("%s: commit held back until the audit events are written", self.name)
            self.policy.record()


class _FailureLog:
    """Failed commits, logged at most every ``FAILURE_LOG_S`` over every runner of the
    process: 500 subscriptions under a frozen broker fail a commit each every few seconds."""

    def __init__(self) -> None:
        self.logged_at = -FAILURE_LOG_S
        self.unlogged = 0

    def report(self, name: str, exc: StorageUnavailable) -> None:
        now = time.monotonic()
        if now - self.logged_at < FAILURE_LOG_S:
            self.unlogged += 1
            return
        log.warning(
            "%s: commit failed; delivering on, the next supersedes it: %s "
            "(and %d more failed commits since the last such line)",
            name,
            exc,
            self.unlogged,
        )
        self.logged_at, self.unlogged = now, 0


_FAILURES = _FailureLog()


def _retrieved(future: asyncio.Future[None]) -> None:
    # Its caller may be gone (cancelled while it ran): the error is the caller's or the
    # drain's to report, never the loop's "exception was never retrieved".
    if not future.cancelled():
        future.exception()

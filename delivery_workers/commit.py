"""Flushing a subscription's commits: :class:`Committer` writes, when
the :class:`~.tracking.CommitPolicy` says it is due, the positions below which every message
of each source is terminal (:class:`~.tracking.CommitTracker`), after the audit events of
those messages are durable."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from .tracking import AuditBarrier, CommitPolicy

log = logging.getLogger(__name__)
COMMIT_DRAIN_S = 5.0  # how long a stopping runner waits for the commit it has under way


class Committable(Protocol):
    async def commit(self, barrier: AuditBarrier | None = None) -> bool: ...


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
    ) -> None:
        self.policy = policy
        self.name = name
        self.retry_path = retry_path
        self.barrier = barrier  # the audit sink: events before positions (see _commit_now)
        self.main: Committable | None = None
        # Segments a failover left behind, read beside the consume segment (available mode).
        self.behind: list[Committable] = []
        self._committing: asyncio.Future[None] | None = None

    async def run(self) -> None:
        """Commit whenever due, until cancelled."""
        while True:
            wait = self.policy.wait_s()
            if wait is None:  # nothing waits: sleep until something does, not poll
                await self.policy.until_waiting()
                continue
            await asyncio.sleep(max(wait, 0.01))
            if self.policy.due():
                await self.commit()

    async def commit(self) -> None:
        """Commit what is terminal now (see the class doc)."""
        self._committing = asyncio.ensure_future(self._commit_now())
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


def _retrieved(future: asyncio.Future[None]) -> None:
    # Its caller may be gone (cancelled while it ran): the error is the caller's or the
    # drain's to report, never the loop's "exception was never retrieved".
    if not future.cancelled():
        future.exception()

"""What a process may still do in its session's name: the local lease that fences a zombie.

A metastore session ends on the *server* (ZooKeeper expires it ``timeout_s`` after it last
heard from the client; the embedded store's reaper likewise), and its ephemeral nodes, the
locks among them, go with it. A client cut off from the server learns that only after it
reconnects, and meanwhile another process may hold the same lock. So a holder acts on its
locks only while its lease is valid:

- each round trip the store confirms (a heartbeat, about every ``timeout_s / 6``) extends
  the lease to ``sent + timeout_s / 2``, where ``sent`` is when that request *left*: the
  server heard it later, so it cannot expire the session before ``sent + timeout_s``;
- a lost session ends the lease at once; a *suspended* connection does not: the server
  cannot expire the session before a confirmed request's ``sent + timeout_s``, whatever
  the connection does meanwhile, so the lease runs to its end on its own clock, and a
  connection remade within it (on another server: a peer restarted in a rolling upgrade,
  a silent peer left by the store) fences nothing. Until 2026-11-29 a suspension ended
  the lease at once, and every such reconnect stopped the worker's runners and redelivered
  what they had not committed (tests/chaos/test_slow_network.py);
- the clock is the monotonic one: a process paused (SIGSTOP, a long GC, a frozen VM) finds
  its lease lapsed when it resumes, before it sends anything;
- a process whose member id another live process holds (its session expired meanwhile and
  a second process took the id: the store's re-join is refused) is *revoked*: its lease
  ends for good, whatever the new session confirms. It acted in that member's name and may
  not again: the locks of a member are taken and cleared by member id
  (delivery_workers/unit_lock.py), so two live holders of one id would take each other's.

Between a lapse and the earliest moment another process can take a lock there is at least
``timeout_s / 2``: the time for the holder to stop (cancel what it does; requests already on
the wire are abandoned). docs/reliability.md gives the argument in full.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

HEARTBEATS_PER_TIMEOUT = 6  # how often a store confirms its session, per session timeout
VALID_FRACTION = 0.5  # of the session timeout: how long a confirmation holds


class SessionLease:
    """See the module doc. ``timeout_s`` None: a lease that never lapses (a store whose
    session cannot be lost under its holder).

    Cheap to confirm and to wait on: a confirmation wakes nobody unless the lease was
    lapsed, and every :meth:`until_lapsed` waiter (one per held lock: 10^3 in a worker)
    shares one future that one watchdog task settles, instead of each waking on every
    confirmation."""

    def __init__(
        self, timeout_s: float | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.timeout_s = timeout_s
        self.clock = clock
        self._until = float("inf") if timeout_s is None else float("-inf")
        self._changed = asyncio.Event()  # set on a suspension and when valid again
        self._lapse: asyncio.Future[None] | None = None  # shared by the until_lapsed waiters
        self._watchdog: asyncio.Task[None] | None = None
        self.revoked: str | None = None  # why, once revoked (revoke)

    @property
    def heartbeat_s(self) -> float:
        """How often the store should confirm the session."""
        return (self.timeout_s or 60.0) / HEARTBEATS_PER_TIMEOUT

    def valid(self) -> bool:
        return self.clock() < self._until

    def confirm(self, sent: float) -> None:
        """A round trip that left at ``sent`` (this lease's clock) was answered."""
        if self.timeout_s is not None and self.revoked is None:
            was_valid = self.valid()
            self._until = max(self._until, sent + self.timeout_s * VALID_FRACTION)
            if not was_valid and self.valid():
                self._wake()

    def suspend(self) -> None:
        """The session is lost: the lease ends now, until a new confirmation."""
        if self.timeout_s is not None:
            self._until = float("-inf")
            self._wake()

    def revoke(self, why: str) -> None:
        """The lease ends now and for good (see the module doc): no confirmation extends
        it again. Waiters of :meth:`until_valid` wait for ever; readiness says ``why``."""
        self.revoked = why
        self._until = float("-inf")
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def until_lapsed(self) -> None:
        """Return once the lease is not valid (at once if it is not now)."""
        if not self.valid():
            return
        if self._lapse is None or self._lapse.done():
            self._lapse = asyncio.get_running_loop().create_future()
            self._watchdog = asyncio.create_task(self._watch(self._lapse))
        await asyncio.shield(self._lapse)

    async def _watch(self, lapse: asyncio.Future[None]) -> None:
        """Settle ``lapse`` when the lease ends: by the clock, or by a suspension."""
        while (left := self._until - self.clock()) > 0:
            changed = self._changed
            try:
                async with asyncio.timeout(min(left, 3600.0)):
                    await changed.wait()
            except TimeoutError:
                pass
        if not lapse.done():
            lapse.set_result(None)

    async def aclose(self) -> None:
        """Stop the watchdog (its store closes); waiters of a lapse are woken."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            await asyncio.gather(self._watchdog, return_exceptions=True)
        if self._lapse is not None and not self._lapse.done():
            self._lapse.set_result(None)

    async def until_valid(self) -> None:
        """Return once the lease is valid (at once if it is now)."""
        while not self.valid():
            await self._changed.wait()

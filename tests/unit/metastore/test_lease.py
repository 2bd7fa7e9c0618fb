"""The session lease: valid for half a session timeout after the last confirmed round trip
left, ended at once by a suspended connection, lapsed after a pause (metastore/lease.py)."""

from __future__ import annotations

import asyncio

import pytest

from metastore.lease import SessionLease
from tests.support.clock import ManualClock


def test_a_confirmation_holds_half_the_session_timeout_from_when_it_left() -> None:
    clock = ManualClock(100.0)
    lease = SessionLease(10.0, clock)
    assert not lease.valid()  # nothing confirmed yet
    lease.confirm(sent=99.0)  # answered at 100: it counts from 99
    clock.now = 103.9
    assert lease.valid()
    clock.now = 104.0
    assert not lease.valid()
    assert lease.heartbeat_s == pytest.approx(10 / 6)


def test_an_older_answer_never_shortens_the_lease() -> None:
    clock = ManualClock(100.0)
    lease = SessionLease(10.0, clock)
    lease.confirm(sent=100.0)
    lease.confirm(sent=96.0)  # a slow answer arriving late
    clock.now = 104.9
    assert lease.valid()


def test_a_suspended_connection_ends_it_at_once_until_confirmed_again() -> None:
    clock = ManualClock(100.0)
    lease = SessionLease(10.0, clock)
    lease.confirm(sent=100.0)
    lease.suspend()
    assert not lease.valid()
    lease.confirm(sent=100.5)
    assert lease.valid()


def test_a_pause_longer_than_the_lease_finds_it_lapsed() -> None:
    clock = ManualClock(100.0)
    lease = SessionLease(4.0, clock)
    lease.confirm(sent=100.0)
    clock.now += 30  # SIGSTOP: the monotonic clock keeps counting
    assert not lease.valid()


def test_without_a_timeout_it_never_lapses() -> None:
    lease = SessionLease(None)
    assert lease.valid()
    lease.suspend()
    assert lease.valid()


async def test_waiters_wake_on_the_lapse_and_on_the_confirmation() -> None:
    lease = SessionLease(0.2)
    lease.confirm(sent=lease.clock())
    async with asyncio.timeout(5):
        await lease.until_lapsed()  # by the clock, about 0.1 s later
        assert not lease.valid()
        waiting = asyncio.ensure_future(lease.until_valid())
        await asyncio.sleep(0)
        assert not waiting.done()
        lease.confirm(sent=lease.clock())
        await waiting
        suspended = asyncio.ensure_future(lease.until_lapsed())
        await asyncio.sleep(0)
        lease.suspend()
        await suspended


async def test_many_waiters_share_one_watchdog_and_confirmations_wake_none() -> None:
    """A worker waits on its lease once per held lock (10^3): one watchdog settles them all,
    and a confirmation of a valid lease (every answer of the store) wakes nobody."""
    lease = SessionLease(10.0)
    lease.confirm(sent=lease.clock())
    waiters = [asyncio.create_task(lease.until_lapsed()) for _ in range(100)]
    await asyncio.sleep(0)
    watchdogs = [t for t in asyncio.all_tasks() if t.get_coro().__name__ == "_watch"]  # type: ignore[union-attr]
    assert len(watchdogs) == 1
    changed = lease._changed
    for _ in range(50):
        lease.confirm(sent=lease.clock())
    assert lease._changed is changed  # nobody was woken
    await asyncio.sleep(0.01)
    assert not any(w.done() for w in waiters)
    lease.suspend()
    async with asyncio.timeout(1):
        await asyncio.gather(*waiters)
    await lease.aclose()


async def test_a_revoked_lease_ends_at_once_and_no_confirmation_extends_it() -> None:
    clock = ManualClock(100.0)
    lease = SessionLease(10.0, clock)
    lease.confirm(sent=100.0)
    lapsed = asyncio.ensure_future(lease.until_lapsed())
    lease.revoke("member /m is held by another live process")
    await asyncio.wait_for(lapsed, 1)
    lease.confirm(sent=100.0)  # the new session's answers
    assert not lease.valid()
    assert lease.revoked == "member /m is held by another live process"
    valid = asyncio.ensure_future(lease.until_valid())
    await asyncio.sleep(0.05)
    assert not valid.done()
    valid.cancel()

"""Cancelling helpers never swallow their caller's own cancellation (core/tasks.py).

A worker's runner cancelled while its clean-up was cancelling its parts went on: the
``CancelledError`` meant for it was taken for a part's, so its restart loop started a new
runner that delivered without the lock (found by the zombie-worker test, issue 34)."""

from __future__ import annotations

import asyncio

import pytest

from core.errors import MetaStoreUnavailable
from core.tasks import TaskSet, cancel_all, stop_if_cancelled


async def _slow_to_stop() -> None:
    try:
        await asyncio.sleep(3600)
    finally:
        await asyncio.sleep(0.05)  # a clean-up that takes a moment


async def test_cancel_all_swallows_only_the_cancellations_it_made() -> None:
    part = asyncio.ensure_future(_slow_to_stop())
    await asyncio.sleep(0)
    await cancel_all([part])  # the part's cancellation: not an error here
    assert part.cancelled()


async def test_a_caller_cancelled_while_cancelling_its_parts_stays_cancelled() -> None:
    went_on = asyncio.Event()

    async def owner() -> None:
        part = asyncio.ensure_future(_slow_to_stop())
        await asyncio.sleep(0)
        await cancel_all([part])
        went_on.set()  # must never run: the owner itself was cancelled

    task = asyncio.ensure_future(owner())
    await asyncio.sleep(0.01)  # the owner is inside cancel_all, the part in its clean-up
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not went_on.is_set()


async def test_a_task_set_closed_by_a_cancelled_owner_stays_cancelled() -> None:
    went_on = asyncio.Event()

    async def owner() -> None:
        tasks = TaskSet()
        tasks.spawn(_slow_to_stop())
        await asyncio.sleep(0)
        await tasks.aclose()
        went_on.set()

    task = asyncio.ensure_future(owner())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not went_on.is_set()


async def test_a_restart_loop_stops_when_its_cancellation_was_replaced_by_an_error() -> None:
    """The clean-up of a cancelled round fails (the metastore is away): its error replaces
    the CancelledError, and only stop_if_cancelled keeps the loop from starting over."""
    rounds = 0

    async def one_round() -> None:
        nonlocal rounds
        rounds += 1
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)
            raise MetaStoreUnavailable("zookeeper failed on /status: ConnectionLoss")

    async def loop() -> None:
        while rounds < 5:
            try:
                await one_round()
            except MetaStoreUnavailable as exc:
                stop_if_cancelled(exc)

    task = asyncio.ensure_future(loop())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert rounds == 1


async def test_a_restart_loop_goes_on_after_an_error_of_its_own() -> None:
    rounds = 0

    async def loop() -> None:
        nonlocal rounds
        while rounds < 3:
            try:
                rounds += 1
                raise MetaStoreUnavailable("zookeeper failed on /x: ConnectionLoss")
            except MetaStoreUnavailable as exc:
                stop_if_cancelled(exc)

    await loop()
    assert rounds == 3

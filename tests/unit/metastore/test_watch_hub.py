"""Closing a store ends its watch pumps even when a cancellation is lost on the way.

Python 3.11's ``asyncio.wait_for`` returns its inner result and drops the ``CancelledError``
when the cancel arrives in the loop step in which the inner future completes. A pump that
lost its cancel that way went back to waiting for a wake-up, and ``WatchHub.close`` waited for
it forever (the fence test's hang). The reader below loses the cancel on purpose.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from metastore._support import WatchHub, WatchIterator


def _reader_that_loses_its_cancel(started: asyncio.Event) -> Callable[..., object]:
    def make(wake: asyncio.Event) -> Callable[[], Awaitable[int]]:
        async def read() -> int:
            started.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                return 1  # what 3.11's wait_for does when the inner future just finished
            return 0

        return read

    return make


async def test_close_ends_a_pump_whose_cancellation_was_lost() -> None:
    hub = WatchHub()
    started = asyncio.Event()
    watch: WatchIterator[int] = WatchIterator(_reader_that_loses_its_cancel(started), hub, 0.1)
    taking = asyncio.ensure_future(watch.__anext__())
    async with asyncio.timeout(5):
        await started.wait()
    async with asyncio.timeout(5):  # before the fix: forever
        await hub.close()
    assert len(hub) == 0
    assert await taking == 1  # the value read last still reaches the consumer

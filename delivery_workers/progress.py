"""Progress of one subscription's delivery: a wake-up for whoever waits for a change
(something became ready, terminal or free) and the count of requests on the wire.

The dispatch waits on it for work, the segment intake for its last messages to end, a
stopping runner for the requests on the wire; the attempts count their requests here. It
calls nobody: everyone along the path may tell it, and wait on it, without calling back
into the one before. Example::

    progress = Progress()
    with progress.on_the_wire():      # a request from its send to its answer
        ...
    progress.wake()                   # a message became terminal
    await progress.wait(1.0)          # until the next change, at most a second
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class Progress:
    """See the module doc."""

    def __init__(self) -> None:
        self._changed = asyncio.Event()
        self.sending = 0  # requests on the wire now (a stopping runner lets them end)

    def wake(self) -> None:
        self._changed.set()

    async def wait(self, timeout: float | None) -> None:
        """Until something changed, at most ``timeout`` seconds (None: no bound, for a
        waiter whose only way forward is a change told here: no timer to make and cancel)."""
        if timeout is None:
            await self._changed.wait()
        else:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._changed.wait()
        self._changed.clear()

    @contextlib.contextmanager
    def on_the_wire(self) -> Iterator[None]:
        """Count a request from its send to its answer (:attr:`sending`)."""
        self.sending += 1
        try:
            yield
        finally:
            self.sending -= 1
            self._changed.set()

"""A steady load while a test does something else (pause, stop, a cutover).

load = Producing(lambda i: produce_one(f"m{i}"))
...
produced = await load.stop()   # every id that was stored, in order
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


class Producing:
    """Calls ``send(i)`` for i = 0, 1, … every ``interval`` seconds; ``send`` stores message
    ``i`` and returns its id. Stopped by an event, never cancelled: a cancel could land after
    the store took a message and before it is listed here, and a test would count one too few.
    """

    def __init__(self, send: Callable[[int], Awaitable[str]], interval: float = 0.01) -> None:
        self.produced: list[str] = []
        self._send, self._interval = send, interval
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            self.produced.append(await self._send(i))
            i += 1
            await asyncio.sleep(self._interval)  # pacing, not a wait

    async def stop(self) -> list[str]:
        """Stop after the message on the wire; every id stored."""
        self._stop.set()
        await self._task
        return self.produced

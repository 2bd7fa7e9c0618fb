"""Concurrent calls joined into one: under load a few round trips carry many claims."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(eq=False)
class Batcher(Generic[T, R]):
    """Items of concurrent :meth:`submit` calls passed to ``apply`` together (at most
    ``parallel`` calls in flight, each of at most ``max_items``): alone, an item goes at once;
    items that arrive while the calls are busy wait and go together in the next one. ``apply``
    returns a result per item, in order; its exception is every item's of that call.

        inserts = Batcher(table.insert_many)  # list[Row] -> list[bool]
        inserted = await inserts.submit(row)
    """

    apply: Callable[[Sequence[T]], Awaitable[Sequence[R]]]
    _: KW_ONLY
    parallel: int = 4
    max_items: int = 500
    _queue: deque[tuple[T, asyncio.Future[R]]] = field(default_factory=deque, init=False)
    _running: int = field(default=0, init=False)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def submit(self, item: T) -> R:
        return await self.submit_soon(item)

    def submit_soon(self, item: T) -> asyncio.Future[R]:
        """:meth:`submit` without waiting: the item's future (no task per item)."""
        done: asyncio.Future[R] = asyncio.get_running_loop().create_future()
        self._queue.append((item, done))
        if self._running < self.parallel:
            self._running += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return done

    async def drained(self) -> None:
        """Once every item submitted so far has its outcome."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _drain(self) -> None:
        try:
            while self._queue:
                group = [
                    self._queue.popleft() for _ in range(min(self.max_items, len(self._queue)))
                ]
                await self._call(group)
        finally:
            self._running -= 1

    async def _call(self, group: list[tuple[T, asyncio.Future[R]]]) -> None:
        try:
            results = await self.apply([item for item, _ in group])
        except Exception as exc:
            for _, done in group:
                if not done.done():
                    done.set_exception(exc)
            return
        except BaseException:  # cancelled: nobody waits any more
            for _, done in group:
                done.cancel()
            raise
        for (_, done), result in zip(group, results, strict=True):
            if not done.done():
                done.set_result(result)

    async def aclose(self) -> None:
        """Stop: items still queued are cancelled (:meth:`drained` first to keep them)."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

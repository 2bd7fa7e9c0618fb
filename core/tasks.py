"""Background tasks a component starts and cancels when it closes. Example::

tasks = TaskSet()
tasks.spawn(reader.run())
...
await tasks.aclose()  # cancels what still runs, and waits for it
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine, Sequence
from typing import Any


class TaskSet:
    """See the module doc. A task is forgotten once it ends."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[None]] = set()

    def spawn(self, work: Awaitable[None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        await cancel_all(list(self._tasks))


async def cancel_all(tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Cancel ``tasks`` and wait until each has ended (in order). Their cancellations are
    swallowed, any other error is raised; a cancellation of the *caller* itself, arriving
    while it waits here, is raised once every task has ended: swallowing it as one of the
    tasks' would let the caller go on as if never cancelled."""
    for task in tasks:
        task.cancel()
    cancelled = False
    for task in tasks:
        while not task.done():
            try:
                await asyncio.wait([task])
            except asyncio.CancelledError:
                cancelled = True
        if not task.cancelled() and task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    if cancelled:
        raise asyncio.CancelledError


async def cancel(task: asyncio.Future[None] | None) -> None:
    """Cancel ``task`` (None: nothing to do) and wait until it has ended; only its
    cancellation is swallowed. Example::

        await cancel(self._task)
        self._task = None
    """
    if task is not None:
        await cancel_all([task])


def cancelling() -> bool:
    """True if the current task was asked to cancel, even if its ``CancelledError`` was
    since replaced by another error: clean-up code that awaits (a last commit, a status
    write) raises its own error over the cancellation when the metastore is away. A loop
    that restarts its work on errors must check this and stop, or it outlives whoever
    cancelled it and waits for it (a worker's runner went on delivering a subscription whose
    lock it had lost: tests/integration/test_zombie_worker_real.py)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def stop_if_cancelled(error: BaseException) -> None:
    """In a loop that restarts on ``error``: raise ``CancelledError`` instead if the task was
    cancelled (:func:`cancelling`). Example::

        except HttpbusError as exc:
            stop_if_cancelled(exc)
            log.warning("...; retrying")
    """
    if cancelling():
        raise asyncio.CancelledError from error


async def first_to_end(main: Coroutine[Any, Any, None], helpers: list[asyncio.Task[None]]) -> None:
    """Run ``main`` until it ends or one of ``helpers`` (which run for ever) fails: an error of
    either is raised here, so a failed helper stops its owner instead of stalling it."""
    task = asyncio.create_task(main)
    try:
        await asyncio.wait([task, *helpers], return_when=asyncio.FIRST_COMPLETED)
        for done in [task, *helpers]:
            if done.done():
                done.result()
    finally:
        await cancel_all([task])


async def first_done(*waits: Coroutine[Any, Any, Any]) -> None:
    """Until the first of ``waits`` ends (its error, if any, is not raised); the others are
    cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_all(tasks)

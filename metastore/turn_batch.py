"""Requests asked in one turn of the event loop, sent to ZooKeeper as one batch request.

A worker starting a thousand units reads, for each, its subscription and its endpoint's
failure streak, and creates its lock: thousands of requests at once, each a future, a
timeout, a hop to kazoo's connection thread and back (175–210 µs of a member's CPU a
request, docs/capacity.md). Asked while the loop runs one batch of callbacks, they are few
requests instead: :class:`TurnBatch` queues each ask and, at the end of the turn, hands the
queue to ``many`` (reads as ``multiRead``, creates as ``multi``: the store's choice); one
ask alone goes to ``one``, as the plain request it is. Each ask keeps its own outcome: a
missing node is None for its caller, another ask's error is not its error; an error of the
whole request (no answer in time) is every caller's.

    gets = TurnBatch(read_one, read_many)
    node = await gets.ask("/topics/p/t")
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Generic, TypeVar

from core.errors import HttpbusError
from core.tasks import TaskSet

A = TypeVar("A")  # what is asked (a path; a path and its data)
R = TypeVar("R")  # its answer


class TurnBatch(Generic[A, R]):
    """See the module doc. ``many`` answers each ask's outcome, in order, its own error
    (an :class:`HttpbusError`) in place of an answer."""

    def __init__(
        self,
        one: Callable[[A], Awaitable[R]],
        many: Callable[[Sequence[A]], Awaitable[list[R | HttpbusError]]],
    ) -> None:
        self._one, self._many = one, many
        self._queued: list[tuple[A, asyncio.Future[R]]] = []
        self._sends = TaskSet()

    async def ask(self, asked: A) -> R:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[R] = loop.create_future()
        self._queued.append((asked, answer))
        if len(self._queued) == 1:
            loop.call_soon(self._send)
        return await answer

    def _send(self) -> None:
        queued, self._queued = self._queued, []
        self._sends.spawn(self._answer(queued))

    async def _answer(self, queued: list[tuple[A, asyncio.Future[R]]]) -> None:
        try:
            if len(queued) == 1:
                outcomes: list[R | HttpbusError] = [await self._one(queued[0][0])]
            else:
                outcomes = await self._many([asked for asked, _ in queued])
        except asyncio.CancelledError:  # closed meanwhile: no caller waits for ever
            for _, answer in queued:
                answer.cancel()
            raise
        except Exception as exc:  # the request's: every caller's error, raised where it waits
            for _, answer in queued:
                _settle(answer, exc)
            return
        for (_, answer), outcome in zip(queued, outcomes, strict=True):
            _settle(answer, outcome)

    async def aclose(self) -> None:
        await self._sends.aclose()


async def each(requests: Iterable[Awaitable[R]]) -> list[R | HttpbusError]:
    """Requests made one by one, at once, as a ``many`` that asks one by one answers: each
    one's answer, or its own httpbus error (another error is raised, as a request of its
    own would raise it)."""
    out: list[R | HttpbusError] = []
    for one in await asyncio.gather(*requests, return_exceptions=True):
        if isinstance(one, BaseException) and not isinstance(one, HttpbusError):
            raise one
        out.append(one)
    return out


def _settle(answer: asyncio.Future[R], outcome: R | Exception) -> None:
    if answer.done():  # its caller was cancelled meanwhile
        return
    if isinstance(outcome, Exception):
        answer.set_exception(outcome)
    else:
        answer.set_result(outcome)

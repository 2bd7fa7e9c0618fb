"""Waiting for something to happen: poll a condition against a deadline, never a count of
rounds (a count stretches with the machine's load; a deadline says what the test promises).

    await until(lambda: len(hook.got) == 6, timeout=30, what="six deliveries")
    layout = await until(lambda: load_layout(meta, sub), what="the subscription's layout")
    until_sync(lambda: proc.poll() is not None, what="the worker to exit")

A condition may return an awaitable (it is awaited); the first truthy value is returned. On
the deadline an ``AssertionError`` says what was awaited, and the last value seen.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


def _timed_out(timeout: float, what: str, last: object) -> AssertionError:
    return AssertionError(f"not within {timeout:g} s: {what or 'the condition'} (last: {last!r})")


async def until(
    condition: Callable[[], T | Awaitable[T]],
    timeout: float = 30,
    what: str = "",
    interval: float = 0.02,
) -> T:
    """Poll ``condition`` every ``interval`` seconds until it is truthy or ``timeout`` passed."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, what, value)
        await asyncio.sleep(interval)


def until_sync(
    condition: Callable[[], T], timeout: float = 30, what: str = "", interval: float = 0.2
) -> T:
    """:func:`until` for code that is not async (processes, threads, a browser)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(timeout, what, value)
        time.sleep(interval)

"""Completions from pulsar-client's threads to the event loop, many per wake-up.

The client calls a send's or a read's callback on one of its own threads. ``pulsar.asyncio``
answers every callback with its own ``call_soon_threadsafe`` (a write to the loop's wake-up
pipe and a loop iteration per message, twice over for reads). Here a callback only appends
its arguments to a queue; the first one since the loop last drained the queue also schedules
one drain, which runs every queued call on the loop thread. A broker receipt that
acknowledges a batch of 500 messages thus wakes the loop once, and every callback's work
(counting outcomes, completing futures) runs on the loop, where it needs no lock.

No call is lost: the loop clears ``_armed`` *before* draining, and a callback appends
*before* it reads ``_armed``; so a call appended after the drain's last look at the queue
sees ``_armed`` cleared and schedules a drain of its own (a spare drain is harmless).
``deque.append`` and ``popleft`` are atomic, so the two threads never corrupt the queue.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class Handover:
    """Runs calls made on any thread on one event loop, in order, batched per wake-up."""

    __slots__ = ("_armed", "_calls", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._calls: deque[tuple[Callable[..., object], tuple[Any, ...]]] = deque()
        self._armed = False

    def call(self, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on the loop soon; safe from any thread, never raises."""
        self._calls.append((fn, args))
        if not self._armed:
            self._armed = True
            try:
                self.loop.call_soon_threadsafe(self._drain)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                pass

    def _drain(self) -> None:
        self._armed = False
        calls = self._calls
        while calls:
            fn, args = calls.popleft()
            try:
                fn(*args)
            except Exception:  # one bad completion must not strand the others
                log.exception("pulsar completion failed")

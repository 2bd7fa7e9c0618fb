"""Hand-offs to the internal topics, durably and in the order they were asked for.

A message handed to a delay level, the hold topic or the DLQ becomes terminal for its source
only when the storage has acknowledged the write (``on_stored`` runs then). One
:class:`HandOff` per subscription writes its records strictly in submission order, batching
consecutive records of one topic into one ``produce_many``; a failed write is tried again
(after ``retry_s``) before anything submitted later is written. That order is what keeps a
group's head ahead of the followers handed off behind it, across a crash.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from httpbus.core.errors import HttpbusError
from httpbus.segments.protocol import Produced, Record, SegmentStore

log = logging.getLogger(__name__)
MAX_BATCH = 500


@dataclass
class _Job:
    topic: str
    record: Record
    on_stored: Callable[[Produced], None]


class HandOff:
    """Serial writer of one subscription's internal records. Example::

    handoff = HandOff(store)
    task = asyncio.create_task(handoff.run())
    handoff.submit(layout.level(5_000), record, lambda produced: source.done(item))
    """

    def __init__(self, store: SegmentStore, retry_s: float = 0.5) -> None:
        self.store = store
        self.retry_s = retry_s
        self._queue: deque[_Job] = deque()
        self._wake = asyncio.Event()
        self.failures = 0
        # Runs before the first write (creates the internal topics on first need).
        self.prepare: Callable[[], Awaitable[None]] | None = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    def submit(self, topic: str, record: Record, on_stored: Callable[[Produced], None]) -> None:
        """Queue ``record`` for ``topic``; ``on_stored`` runs once it is durably stored."""
        self._queue.append(_Job(topic, record, on_stored))
        self._wake.set()

    async def run(self) -> None:
        """Write until cancelled."""
        while True:
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if self.prepare is not None:
                try:
                    await self.prepare()
                    self.prepare = None
                except HttpbusError as exc:
                    log.warning("cannot create the internal topics: %s; trying again", exc)
                    await asyncio.sleep(self.retry_s)
                    continue
            run = self._next_run()
            try:
                results = await self.store.produce_many(run[0].topic, [j.record for j in run])
            except HttpbusError as exc:
                results = [exc] * len(run)
            failed = False
            for job, result in zip(run, results, strict=True):
                if isinstance(result, Exception) or failed:
                    failed = True  # keep it (and all after it) at the front, in order
                    continue
                self._queue.popleft()
                job.on_stored(result)
            if failed:
                self.failures += 1
                log.warning("hand-off to %s failed; trying again", run[0].topic)
                await asyncio.sleep(self.retry_s)

    def _next_run(self) -> list[_Job]:
        """The longest prefix of the queue that goes to one topic (at most MAX_BATCH)."""
        first = self._queue[0]
        run: list[_Job] = []
        for job in self._queue:
            if job.topic != first.topic or len(run) >= MAX_BATCH:
                break
            run.append(job)
        return run

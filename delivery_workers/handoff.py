"""Hand-offs to the internal topics, durably and in the order they were asked for.

A message handed to a delay level, the hold topic or the DLQ becomes terminal for its source
only when the storage has acknowledged the write (``on_stored`` runs then). One
:class:`HandOff` per subscription writes its records in batches, one ``produce_many`` per
topic, the topics of a batch at once; per topic, records keep their submission order. The
hold topic is never written in the same batch as the others, so a group's followers are
stored only after the head they follow — that order is what keeps a group in order across
a crash. A failed write is tried again (after ``retry_s``), ahead of what came later.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.errors import HttpbusError
from segments.protocol import Produced, Record, SegmentStore

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

    def __init__(self, store: SegmentStore, hold_topic: str, retry_s: float = 0.5) -> None:
        self.store = store
        self.hold_topic = hold_topic
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
            batch = self._next_batch()
            failed = await self._write(batch)
            if failed:
                self.failures += 1
                log.warning("hand-off of %d records failed; trying again", len(failed))
                self._queue.extendleft(reversed(failed))  # at the front, in order
                await asyncio.sleep(self.retry_s)

    async def _write(self, batch: list[_Job]) -> list[_Job]:
        """Write ``batch`` (one ``produce_many`` per topic, the topics at once); run the
        callbacks of the stored records in submission order; return the failed jobs."""
        by_topic: dict[str, list[_Job]] = {}
        for job in batch:
            by_topic.setdefault(job.topic, []).append(job)
        outcomes = await asyncio.gather(
            *(self._produce(topic, jobs) for topic, jobs in by_topic.items())
        )
        result: dict[int, Produced | Exception] = {}
        for jobs, results in zip(by_topic.values(), outcomes, strict=True):
            for job, outcome in zip(jobs, results, strict=True):
                result[id(job)] = outcome
        failed = []
        for job in batch:
            outcome = result[id(job)]
            if isinstance(outcome, Exception):
                failed.append(job)
            else:
                job.on_stored(outcome)
        return failed

    async def _produce(self, topic: str, jobs: list[_Job]) -> list[Produced | Exception]:
        try:
            return await self.store.produce_many(topic, [j.record for j in jobs])
        except HttpbusError as exc:
            return [exc] * len(jobs)

    def _next_batch(self) -> list[_Job]:
        """Take the next records to write together: up to MAX_BATCH, either all for the hold
        topic or none. Records of one topic keep their order in any case; the boundary keeps
        a group's followers (hold) from being stored before the head they follow (a delay
        level or the DLQ) was, and a follower's hold write ahead of its DLQ write."""
        holding = self._queue[0].topic == self.hold_topic
        batch: list[_Job] = []
        while self._queue and len(batch) < MAX_BATCH:
            if (self._queue[0].topic == self.hold_topic) != holding:
                break
            batch.append(self._queue.popleft())
        return batch

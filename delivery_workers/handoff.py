"""Hand-offs to the internal topics, durably and in the order they were asked for.

A message handed to a delay level, the hold topic or the DLQ becomes terminal for its source
only when the storage has acknowledged the write. One :class:`HandOff` per subscription
writes its records in batches, one ``produce_many`` per topic, the topics of a batch at
once; per topic, records keep their submission order. The hold topic is never written in the
same batch as the others, so a group's followers are stored only after the head they follow
— that order is what keeps a group in order across a crash. A failed write is tried again
(after ``retry_s``), ahead of what came later.

Each job carries a value, ``then``, that says what its storage makes terminal;
:meth:`HandOff.stored` returns the stored jobs' values (with where they were stored) to its
caller, the retry path (:mod:`.retry_path`), which carries them out. The hand-off calls
nobody back. Before its first write it creates the internal topics
(:meth:`.internal_topics.InternalTopics.create`).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.errors import HttpbusError
from segments.protocol import Produced, Record

from .internal_topics import InternalTopics

log = logging.getLogger(__name__)
MAX_BATCH = 500
T = TypeVar("T")


@dataclass
class _Job(Generic[T]):
    topic: str
    record: Record
    then: T


class HandOff(Generic[T]):
    """Serial writer of one subscription's internal records. Example::

    handoff: HandOff[Stored] = HandOff(topics)
    handoff.submit(topics.layout.level(5_000), record, msg)
    while True:
        for msg, produced in await handoff.stored():
            source.done(msg)  # terminal: its hand-off is stored
    """

    def __init__(self, topics: InternalTopics, retry_s: float = 0.5) -> None:
        self.topics = topics
        self.retry_s = retry_s
        self._queue: deque[_Job[T]] = deque()
        self._wake = asyncio.Event()
        self._failed = False  # the last write failed: wait retry_s before the next
        self.failures = 0

    @property
    def pending(self) -> int:
        return len(self._queue)

    def submit(self, topic: str, record: Record, then: T) -> None:
        """Queue ``record`` for ``topic``; ``then`` comes back from :meth:`stored` once the
        record is durably stored."""
        self._queue.append(_Job(topic, record, then))
        self._wake.set()

    async def stored(self) -> list[tuple[T, Produced]]:
        """Write the next batch; the values of its stored jobs in submission order (a failed
        job goes back to the front, and is written again after ``retry_s``)."""
        while True:
            if self._failed:
                self._failed = False
                await asyncio.sleep(self.retry_s)
            if not self._queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            if not self.topics.created:
                try:
                    await self.topics.create()
                except HttpbusError as exc:
                    log.warning("cannot create the internal topics: %s; trying again", exc)
                    await asyncio.sleep(self.retry_s)
                    continue
            stored, failed = await self._write(self._next_batch())
            if failed:
                self.failures += 1
                self._failed = True
                log.warning("hand-off of %d records failed; trying again", len(failed))
                self._queue.extendleft(reversed(failed))  # at the front, in order
            if stored:
                return stored

    async def _write(self, batch: list[_Job[T]]) -> tuple[list[tuple[T, Produced]], list[_Job[T]]]:
        """Write ``batch`` (one ``produce_many`` per topic, the topics at once); the stored
        jobs' values in submission order, and the failed jobs."""
        by_topic: dict[str, list[_Job[T]]] = {}
        for job in batch:
            by_topic.setdefault(job.topic, []).append(job)
        outcomes = await asyncio.gather(
            *(self._produce(topic, jobs) for topic, jobs in by_topic.items())
        )
        result: dict[int, Produced | Exception] = {}
        for jobs, results in zip(by_topic.values(), outcomes, strict=True):
            for job, outcome in zip(jobs, results, strict=True):
                result[id(job)] = outcome
        stored: list[tuple[T, Produced]] = []
        failed: list[_Job[T]] = []
        for job in batch:
            outcome = result[id(job)]
            if isinstance(outcome, Exception):
                failed.append(job)
            else:
                stored.append((job.then, outcome))
        return stored, failed

    async def _produce(self, topic: str, jobs: list[_Job[T]]) -> list[Produced | Exception]:
        try:
            return await self.topics.store.produce_many(topic, [j.record for j in jobs])
        except HttpbusError as exc:
            return [exc] * len(jobs)

    def _next_batch(self) -> list[_Job[T]]:
        """Take the next records to write together: up to MAX_BATCH, either all for the hold
        topic or none. Records of one topic keep their order in any case; the boundary keeps
        a group's followers (hold) from being stored before the head they follow (a delay
        level or the DLQ) was, and a follower's hold write ahead of its DLQ write."""
        hold_topic = self.topics.layout.hold
        holding = self._queue[0].topic == hold_topic
        batch: list[_Job[T]] = []
        while self._queue and len(batch) < MAX_BATCH:
            if (self._queue[0].topic == hold_topic) != holding:
                break
            batch.append(self._queue.popleft())
        return batch

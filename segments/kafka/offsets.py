"""Committed offsets of a consumer group, read through a consumer *of that group*.

Why not the AdminClient's ``list_consumer_group_offsets``: when the broker answers it with a
group-level error that asks the client to find the coordinator again (``NOT_COORDINATOR``,
``COORDINATOR_NOT_AVAILABLE``), librdkafka hands that re-query to the client's own consumer
group, and an AdminClient has none: it dereferences NULL and the whole process dies with
SIGSEGV in thread ``rdk:main`` (librdkafka 2.16, the version confluent-kafka 2.16.1 bundles;
upstream confluentinc/librdkafka#5040, fix proposed in #5318). A fresh broker answers so while
it loads ``__consumer_offsets``: one run in three died in a reproduction, and a delivery
worker taking over a subscription died so in CI. A consumer with ``group.id`` set owns that
group, so the same answer makes it look the coordinator up and retry. It never subscribes, so
it never joins the group or disturbs anyone's commits.

Commits still go through the AdminClient (:mod:`.commits`): its OffsetCommit handler checks
for a missing consumer group, and it is the only way that scales to hundreds of groups per
process (a consumer per group committing every second did not). :mod:`.commits` also says how
it avoids the AdminClient's own flaw with a frozen broker (an abort, not a crash to catch).

Consumers are kept per group, least recently used evicted (each holds a few librdkafka
threads and a connection), and used one call at a time under their own lock, on threads of
their own: a blocking ``committed()`` waits for the coordinator.

**The read's bound is the read's own.** A worker starting (or 500 runners restarting as a
frozen broker woke) asks for thousands of groups at once, queued for ``THREADS`` threads. A
bound around the queued call timed out the reads still waiting for a thread, and each runner
failed, restarted and queued again: at 2 000 idle subscriptions the start never settled
(``bench/idle_subs.py``). So the time a read may take (``timeout``) runs from when a thread
takes it, transient errors retried on that thread within it, and the wait for a thread is
bounded apart, by ``QUEUE_S``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from confluent_kafka import Consumer, KafkaException, TopicPartition

from core.errors import StorageUnavailable

from .config import KafkaSettings
from .consumer import ConsumerCache, GuardedConsumer
from .errors import is_transient, translate, unavailable

CACHE_SIZE = 8  # groups whose consumer is kept; commits and status read a handful at once
THREADS = 4
QUEUE_S = 120.0
"""How long a read may wait for a thread (its own bound starts then: see the module doc)."""
RETRY_S = 0.05  # between the tries of a read that failed transiently
SLACK_S = 1.0  # beyond its own bound, before a read on a thread is given up on

T = TypeVar("T")


class _GroupReader(GuardedConsumer):
    """One consumer of ``group``, created on first use."""

    def __init__(self, settings: KafkaSettings, group: str) -> None:
        super().__init__()
        self._settings = settings
        self._group = group

    def committed(self, topic: str, partitions: int, timeout: float) -> dict[int, int] | None:
        """What the group committed on ``topic`` (never committed: absent), retried while it
        fails transiently, within ``timeout``; None if closed."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self._committed_once(topic, partitions, deadline)
            except StorageUnavailable as exc:
                if not is_transient(exc) or time.monotonic() + RETRY_S > deadline:
                    raise
            time.sleep(RETRY_S)

    def _committed_once(
        self, topic: str, partitions: int, deadline: float
    ) -> dict[int, int] | None:
        what = f"committed positions of {self._group} on {topic}"
        with self._lock:
            if self._closed:
                return None
            wanted = [TopicPartition(topic, p) for p in range(partitions)]
            try:
                got = self._made().committed(
                    wanted, timeout=max(0.001, deadline - time.monotonic())
                )
            except KafkaException as exc:
                raise translate(exc, what) from exc
        out: dict[int, int] = {}
        for tp in got:
            if tp.error is not None:
                raise translate(tp.error, what)
            if tp.offset >= 0:
                out[tp.partition] = int(tp.offset)
        return out

    def _made(self) -> Any:
        if self._consumer is None:
            self._consumer = Consumer({**self._settings.consumer(), "group.id": self._group})
        return self._consumer


class GroupOffsets(ConsumerCache[str, _GroupReader]):
    """The group readers of one store (see the module doc)."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(CACHE_SIZE, THREADS, "httpbus-kafka-group")
        self._settings = settings

    async def committed(
        self, group: str, topic: str, partitions: int, timeout: float
    ) -> dict[int, int]:
        """What ``group`` committed on ``topic``, per partition (never committed: absent):
        ``timeout`` bounds the read once a thread takes it, ``QUEUE_S`` the wait for one."""
        while True:
            reader = self._get(group, lambda: _GroupReader(self._settings, group))
            got = await self._in_turn(
                partial(reader.committed, topic, partitions, timeout),
                timeout,
                f"committed positions of {group} on {topic}",
            )
            if got is not None:
                return got

    async def _in_turn(self, read: Callable[[], T], timeout: float, what: str) -> T:
        """``read()`` on a thread of the pool: up to ``QUEUE_S`` for a thread, then up to
        ``timeout`` (and a little: the read bounds itself) for the read."""
        loop = asyncio.get_running_loop()
        taken = asyncio.Event()

        def job() -> T:
            loop.call_soon_threadsafe(taken.set)  # runs before the result is handed over
            return read()

        running = loop.run_in_executor(self._executor, job)
        try:
            async with asyncio.timeout(QUEUE_S):
                await taken.wait()
        except TimeoutError:
            running.cancel()  # still queued: it never runs
            raise unavailable(what, f"waited {QUEUE_S:g}s for a thread") from None
        try:
            async with asyncio.timeout(timeout + SLACK_S):
                return await running
        except TimeoutError as exc:
            raise unavailable(what, f"got no answer within {timeout:g}s") from exc

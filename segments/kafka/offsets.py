"""Committed offsets of a consumer group, read and written through a consumer *of that group*.

Why not the AdminClient: its group-offset calls can kill the whole process, twice over, in
librdkafka 2.16 (the version confluent-kafka 2.16.1 bundles):

- ``list_consumer_group_offsets``: when the broker answers with a group-level error that asks
  the client to find the coordinator again (``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``),
  librdkafka hands that re-query to the client's own consumer group, and an AdminClient has
  none: it dereferences NULL, SIGSEGV in thread ``rdk:main`` (upstream
  confluentinc/librdkafka#5040, fix proposed in #5318). A fresh broker answers so while it
  loads ``__consumer_offsets``: one run in three died in a reproduction, and a delivery worker
  taking over a subscription died so in CI.
- ``alter_consumer_group_offsets`` (and every call sent to a group coordinator): when the
  connection drops under the request, an error path frees what the caller still uses, and the
  process aborts on ``rd_kafka_enq_once_del_source_return: Assertion `eonce->refcnt > 0'``
  (fix proposed in #5397). A broker frozen for ~30 s under a commit did it 2 runs in 2 here.

A consumer with ``group.id`` set owns that group: the same answers make it look the
coordinator up and retry, through code every Kafka consumer runs. It never subscribes, so it
never joins the group or disturbs anyone's commits (a commit from outside the group's
membership is what Kafka calls a standalone commit).

Consumers are kept per group, least recently used evicted (each holds a few librdkafka
threads and a connection), and used one call at a time under their own lock, on threads of
their own: a blocking ``committed()`` waits for the coordinator.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .config import KafkaSettings
from .consumer import ConsumerCache, GuardedConsumer
from .errors import translate, unavailable

CACHE_SIZE = 8  # groups whose consumer is kept; commits and status read a handful at once
THREADS = 4


class _GroupReader(GuardedConsumer):
    """One consumer of ``group``, created on first use."""

    def __init__(self, settings: KafkaSettings, group: str) -> None:
        super().__init__()
        self._settings = settings
        self._group = group
        self._outcome: tuple[Any, list[Any]] | None = None  # of the last commit: see commit

    def committed(self, topic: str, partitions: int, timeout: float) -> dict[int, int] | None:
        """What the group committed on ``topic`` (never committed: absent); None if closed."""
        what = f"committed positions of {self._group} on {topic}"
        with self._lock:
            if self._closed:
                return None
            wanted = [TopicPartition(topic, p) for p in range(partitions)]
            try:
                got = self._made().committed(wanted, timeout=timeout)
            except KafkaException as exc:
                raise translate(exc, what) from exc
        out: dict[int, int] = {}
        for tp in got:
            if tp.error is not None:
                raise translate(tp.error, what)
            if tp.offset >= 0:
                out[tp.partition] = int(tp.offset)
        return out

    def commit(self, topic: str, positions: dict[int, int], timeout: float) -> bool | None:
        """Commit ``positions`` of ``topic`` for the group within ``timeout`` seconds; None if
        closed. Asynchronous, then polled for its outcome: librdkafka's synchronous commit
        has no timeout of its own, and a commit that timed out here may still report later,
        so an outcome counts only if it names exactly these offsets."""
        what = f"commit of {self._group} on {topic}"
        offsets = [TopicPartition(topic, p, off) for p, off in sorted(positions.items())]
        sent = {(topic, tp.partition, tp.offset) for tp in offsets}
        with self._lock:
            if self._closed:
                return None
            consumer = self._made()
            self._outcome = None
            try:
                consumer.commit(offsets=offsets, asynchronous=True)
                deadline = time.monotonic() + timeout
                while (outcome := self._outcome) is None or _names(outcome[1]) != sent:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise unavailable(what, f"got no answer within {timeout:g}s")
                    consumer.poll(min(left, 0.1))  # serves the commit's callback
            except KafkaException as exc:
                raise translate(exc, what) from exc
        error, done = outcome
        if error is not None:
            raise translate(error, what)
        for tp in done:
            if tp.error is not None:
                raise translate(tp.error, what)
        return True

    def _made(self) -> Any:
        if self._consumer is None:
            config = {**self._settings.consumer(), "group.id": self._group}
            self._consumer = Consumer({**config, "on_commit": self._on_commit})
        return self._consumer

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        self._outcome = (error, partitions)


def _names(partitions: list[Any]) -> set[tuple[str, int, int]]:
    return {(tp.topic, tp.partition, tp.offset) for tp in partitions}


class GroupOffsets(ConsumerCache[str, _GroupReader]):
    """The group readers of one store (see the module doc)."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(CACHE_SIZE, THREADS, "httpbus-kafka-group")
        self._settings = settings

    async def committed(
        self, group: str, topic: str, partitions: int, timeout: float
    ) -> dict[int, int]:
        """What ``group`` committed on ``topic``, per partition (never committed: absent)."""
        loop = asyncio.get_running_loop()
        while True:
            reader = self._get(group, lambda: _GroupReader(self._settings, group))
            got = await loop.run_in_executor(
                self._executor, reader.committed, topic, partitions, timeout
            )
            if got is not None:
                return got

    async def commit(
        self, group: str, topic: str, positions: dict[int, int], timeout: float
    ) -> None:
        """Set what ``group`` committed on ``topic`` to ``positions``."""
        if not positions:
            return
        loop = asyncio.get_running_loop()
        while True:
            reader = self._get(group, lambda: _GroupReader(self._settings, group))
            done = await loop.run_in_executor(
                self._executor, reader.commit, topic, positions, timeout
            )
            if done is not None:
                return

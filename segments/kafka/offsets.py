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
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from .config import KafkaSettings
from .consumer import ConsumerCache, GuardedConsumer
from .errors import translate

CACHE_SIZE = 8  # groups whose consumer is kept; commits and status read a handful at once
THREADS = 4


class _GroupReader(GuardedConsumer):
    """One consumer of ``group``, created on first use."""

    def __init__(self, settings: KafkaSettings, group: str) -> None:
        super().__init__()
        self._settings = settings
        self._group = group

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
        """What ``group`` committed on ``topic``, per partition (never committed: absent)."""
        loop = asyncio.get_running_loop()
        while True:
            reader = self._get(group, lambda: _GroupReader(self._settings, group))
            got = await loop.run_in_executor(
                self._executor, reader.committed, topic, partitions, timeout
            )
            if got is not None:
                return got

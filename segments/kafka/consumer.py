"""Reads: partition readers (assign + seek, never a group rebalance) and positions by AdminClient.

A reader is a librdkafka consumer assigned to one (topic, partition). Readers are cached, least
recently used evicted, and a read that continues where the last one stopped reuses the fetch
already under way; any other start re-assigns at that offset. librdkafka consumers are not
safe for concurrent use, so each reader is guarded by its own lock, taken on the read thread
(a cancelled ``read`` leaves its thread finishing before anyone else touches the consumer).

Positions are Kafka offsets: end positions are high watermarks (``OffsetSpec.latest``, read
uncommitted), timestamps are looked up with ``OffsetSpec.for_timestamp``, and commits are the
consumer-group offsets of the given group, altered through the AdminClient (:mod:`.commits`
says how) and read through a consumer of that group (:mod:`.offsets` says why not the
AdminClient).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from confluent_kafka import (
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from core.errors import StorageUnavailable

from ..protocol import Stored
from .config import KafkaSettings
from .errors import resolve, translate

K = TypeVar("K")
R = TypeVar("R", bound="GuardedConsumer")

_OUT_OF_RANGE = frozenset({KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE})


class GuardedConsumer:
    """A librdkafka consumer made on first use, used by one thread at a time under
    ``_lock``; once closed, users get None instead of it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()


class _Reader(GuardedConsumer):
    """One assign-only consumer of one partition, created on first use."""

    def __init__(self, settings: KafkaSettings, topic: str, partition: int) -> None:
        super().__init__()
        self._settings = settings
        self._topic = topic
        self._partition = partition
        self._next: int | None = None  # where the assigned fetch stands

    def read(self, start: int, max_records: int, timeout: float) -> list[Stored] | None:
        """Up to ``max_records`` messages from ``start`` on; None if this reader was closed."""
        with self._lock:
            if self._closed:
                return None
            try:
                return self._read(start, max_records, timeout)
            except KafkaException as exc:
                self._next = None
                raise translate(exc, f"read {self._topic}[{self._partition}]") from exc

    def _read(self, start: int, max_records: int, timeout: float) -> list[Stored]:
        if self._consumer is None:
            self._consumer = Consumer(self._settings.consumer())
        if self._next != start:
            self._consumer.assign([TopicPartition(self._topic, self._partition, start)])
            self._next = start
        first = self._first(start, time.monotonic() + timeout)
        if first is None:
            return []
        batch = [first]
        if max_records > 1:
            for msg in self._consumer.consume(max_records - 1, 0):
                if msg.error() is not None:
                    # The fetch moved past what we return: the next read must re-assign.
                    self._next = None
                    break
                batch.append(msg)
        found = [stored(m) for m in batch if m.offset() >= start]
        if found and self._next is not None:
            self._next = found[-1].position + 1
        return found

    def _first(self, start: int, deadline: float) -> Any:
        while True:
            msg = self._consumer.poll(max(0.0, deadline - time.monotonic()))
            if msg is None:
                return None
            err = msg.error()
            if err is None:
                return msg
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            self._next = None
            if err.code() not in _OUT_OF_RANGE:
                raise translate(err, f"read {self._topic}[{self._partition}]")
            if not self._skip_expired(start, deadline):
                return None  # start is past the end: nothing yet

    def _skip_expired(self, start: int, deadline: float) -> bool:
        """After an out-of-range ``start``: if retention removed it, fetch from the oldest
        message left (positions need not be dense) and say so; False if start is past the end."""
        tp = TopicPartition(self._topic, self._partition)
        timeout = max(0.1, deadline - time.monotonic())
        low, _ = self._consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)
        if start >= low:
            return False
        self._consumer.assign([TopicPartition(self._topic, self._partition, low)])
        self._next = low
        return True


def stored(msg: Any) -> Stored:
    headers = tuple((k, v if v is not None else b"") for k, v in (msg.headers() or ()))
    return Stored(
        partition=msg.partition(),
        position=msg.offset(),
        timestamp_ms=msg.timestamp()[1],
        value=msg.value() or b"",
        key=msg.key(),
        headers=headers,
    )


class ConsumerCache(Generic[K, R]):
    """Guarded consumers by key, least recently used evicted past ``size``, and the threads
    their blocking calls run on."""

    def __init__(self, size: int, threads: int, name: str) -> None:
        self._size = size
        self._readers: OrderedDict[K, R] = OrderedDict()
        self._executor = ThreadPoolExecutor(threads, thread_name_prefix=name)

    def __len__(self) -> int:
        return len(self._readers)

    def _get(self, key: K, make: Callable[[], R]) -> R:
        reader = self._readers.get(key)
        if reader is None:
            reader = self._readers[key] = make()
        self._readers.move_to_end(key)
        while len(self._readers) > self._size:
            _, evicted = self._readers.popitem(last=False)
            self._executor.submit(evicted.close)
        return reader

    async def close(self) -> None:
        readers = list(self._readers.values())
        self._readers.clear()
        loop = asyncio.get_running_loop()
        await asyncio.gather(*(loop.run_in_executor(self._executor, r.close) for r in readers))
        self._executor.shutdown(wait=False)


class PartitionReaders(ConsumerCache[tuple[str, int], _Reader]):
    """The cache of readers of one store, and the threads their blocking polls run on."""

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__(settings.reader_cache_size, settings.reader_threads, "httpbus-kafka-read")
        self._settings = settings

    async def read(
        self, topic: str, partition: int, start: int, max_records: int, timeout: float
    ) -> list[Stored]:
        """Messages of ``partition`` at offsets >= ``start``; waits up to ``timeout`` for the
        first one."""
        loop = asyncio.get_running_loop()
        while True:
            reader = self._get(
                (topic, partition), lambda: _Reader(self._settings, topic, partition)
            )
            got = await loop.run_in_executor(
                self._executor, reader.read, start, max(1, max_records), max(0.0, timeout)
            )
            if got is not None:
                return got

    def close_reader(self, topic: str, partition: int) -> None:
        """Close the reader of the partition, if open (another reads it now: .follow)."""
        reader = self._readers.pop((topic, partition), None)
        if reader is not None:
            self._executor.submit(reader.close)

    def forget(self, topic: str) -> None:
        """Close the readers of ``topic`` (deleted)."""
        for key in [k for k in self._readers if k[0] == topic]:
            self._executor.submit(self._readers.pop(key).close)


async def end_offsets(admin: Any, topic: str, partitions: int, timeout: float) -> dict[int, int]:
    """Per partition, the high watermark: the offset after the last message acknowledged."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    return await _list_offsets(admin, topic, dict.fromkeys(range(partitions), latest), timeout)


async def start_offsets(admin: Any, topic: str, partitions: int, timeout: float) -> dict[int, int]:
    """Per partition, the log start: the first offset retention still holds."""
    earliest = OffsetSpec.earliest()  # type: ignore[no-untyped-call]
    return await _list_offsets(admin, topic, dict.fromkeys(range(partitions), earliest), timeout)


async def offset_at(
    admin: Any, topic: str, partition: int, timestamp_ms: int, timeout: float
) -> int | None:
    """The first offset of ``partition`` whose timestamp is >= ``timestamp_ms``; None if none."""
    spec = {partition: OffsetSpec.for_timestamp(timestamp_ms)}
    offset = (await _list_offsets(admin, topic, spec, timeout))[partition]
    return offset if offset >= 0 else None


_STALE_LEADER = {  # by name, as translate() records them
    KafkaError(code).name()
    for code in (
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
    )
}


async def _list_offsets(
    admin: Any, topic: str, specs: dict[int, Any], timeout: float
) -> dict[int, int]:
    """Once more after a metadata refresh when the leader the client knew is stale: after a
    broker restart librdkafka's AdminClient kept asking with the old leader epoch
    (``FENCED_LEADER_EPOCH`` for 90 s and more, in the chaos test of a killed leader)."""
    try:
        return await _list_offsets_once(admin, topic, specs, timeout)
    except StorageUnavailable as exc:
        if exc.details.get("kafka_error") not in _STALE_LEADER:
            raise
    await asyncio.to_thread(admin.list_topics, topic, timeout=timeout)  # refreshes the cache
    return await _list_offsets_once(admin, topic, specs, timeout)


async def _list_offsets_once(
    admin: Any, topic: str, specs: dict[int, Any], timeout: float
) -> dict[int, int]:
    request = {TopicPartition(topic, p): spec for p, spec in specs.items()}
    futures = admin.list_offsets(
        request, isolation_level=IsolationLevel.READ_UNCOMMITTED, request_timeout=timeout
    )
    what = f"list offsets of {topic}"
    results = await asyncio.gather(
        *(resolve(f, timeout=timeout, what=what) for f in futures.values())
    )
    return {tp.partition: int(r.offset) for tp, r in zip(futures, results, strict=True)}


ADMIN_REQUEST_TIMEOUT_S = 3600.0
"""librdkafka's largest admin request timeout: what :func:`send_commit` asks for (see
:mod:`.commits` for why a commit request must outlive the wait for its coordinator)."""


def send_commit(
    admin: Any, group: str, topic: str, positions: dict[int, int]
) -> concurrent.futures.Future[Any]:
    """Ask ``admin`` to set the committed offsets of ``group`` on ``topic`` to ``positions``;
    the answer (a ``ConsumerGroupTopicPartitions``) comes in the future, checked by
    :func:`check_commit`."""
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p, off) for p, off in sorted(positions.items())]
    )
    futures = admin.alter_consumer_group_offsets([request], request_timeout=ADMIN_REQUEST_TIMEOUT_S)
    return futures[group]  # type: ignore[no-any-return]


def check_commit(got: Any, what: str) -> None:
    """Raise the first partition error of a commit's answer, translated."""
    for tp in got.topic_partitions or ():
        if tp.error is not None:
            raise translate(tp.error, what)

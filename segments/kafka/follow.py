"""Reads that follow partitions: one librdkafka consumer fetches every partition a process
reads in sequence, instead of a consumer per partition.

Why: a worker follows the tail of every partition its subscriptions consume. With a consumer
per (topic, partition) (:mod:`.consumer`), 200 followed partitions cycled through 64 cached
consumers and 32 read threads: nearly every read missed the cache (a new consumer, its
connections and metadata) and a message waited seconds for its partition's turn
(docs/capacity.md). Here one consumer is assigned every followed partition
(``incremental_assign`` at the position to go on from), one thread consumes for all of them,
and what it fetches waits in a buffer per partition, on the event loop, for the read that
continues there. Idle, that is one fetch request per broker every ``fetch.wait.max.ms``,
however many partitions are followed.

A partition is followed from the second read in sequence on: after two reads of it
elsewhere, the second starting where the first ended (:meth:`Followers.ended`), the follow is
assigned where the second ended, so it fetches before the next read comes, and the partition
reader that served the two is closed. A one-off read (a probe, a look at one message) never
starts a follow. :meth:`Followers.read` answers None for every read not to serve here, and
the caller reads with a partition reader of its own: a partition not followed, a read of a
followed one elsewhere (a subscription catching up behind the tail), a read while another
one waits there, a follow that failed (retention removed its position, the topic is gone:
the partition reader says what to do). A follow not read for ``idle_s`` is unassigned, one
not read for ``reseek_s`` gives way to a read elsewhere. A partition whose buffer holds
``buffer_bytes`` is paused until a read drains it, and past ``budget_bytes`` buffered in all
no new follow starts.

librdkafka consumers are not used from two threads at once: the event loop sends the thread
its assignments as commands, applied between two ``consume`` calls (``poll_s`` apart).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from ..protocol import Stored
from .config import KafkaSettings
from .consumer import stored
from .errors import translate

Key = tuple[str, int]
_OVERHEAD = 64  # bytes counted per buffered message beyond its key and value
FETCHED_MAX = 500  # messages handed to the event loop at once
ENDED_KEPT = 10_000  # partitions whose last read elsewhere is remembered


@dataclass(eq=False)
class _Follow:
    next: int  # where the read that continues this follow starts
    gen: int  # of its assignment: what the thread fetched under an earlier one is dropped
    expect: int  # the lowest position the buffer takes next
    read_at: float
    buffer: deque[Stored] = field(default_factory=deque)
    size: int = 0
    paused: bool = False
    busy: bool = False
    failed: bool = False
    error: KafkaError | None = None  # the consumer's, raised to the read waiting then
    news: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self, max_records: int) -> list[Stored]:
        out = [self.buffer.popleft() for _ in range(min(max_records, len(self.buffer)))]
        self.size -= sum(_size(m) for m in out)
        return out


def _size(m: Stored) -> int:
    return len(m.value) + len(m.key or b"") + _OVERHEAD


@dataclass
class _Fetched:
    """What one ``consume`` brought, sorted by follow (on the thread)."""

    batches: list[tuple[Key, int, list[Stored]]] = field(default_factory=list)
    failed: list[tuple[Key, int]] = field(default_factory=list)
    errors: list[KafkaError] = field(default_factory=list)


class Followers:
    """The followed partitions of one Kafka cluster and the consumer that fetches them."""

    def __init__(
        self,
        settings: KafkaSettings,
        *,
        idle_s: float = 300.0,
        reseek_s: float = 2.0,
        buffer_bytes: int = 1 << 20,
        budget_bytes: int = 256 << 20,
        poll_s: float = 0.02,
    ) -> None:
        self._settings = settings
        self._idle_s, self._reseek_s, self._poll_s = idle_s, reseek_s, poll_s
        self._buffer_bytes, self._budget_bytes = buffer_bytes, budget_bytes
        self._follows: dict[Key, _Follow] = {}
        self._ended: dict[Key, int] = {}  # where the last read elsewhere ended, by partition
        self._gens = itertools.count(1)
        self._commands: queue.SimpleQueue[tuple[str, Key, int, int]] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broken = False  # the consumer could not be made: every read goes elsewhere
        self._swept_at = 0.0

    def following(self) -> int:
        return len(self._follows)

    async def read(
        self, topic: str, partition: int, start: int, max_records: int, timeout: float
    ) -> list[Stored] | None:
        """Messages at positions >= ``start`` (waits up to ``timeout`` for the first), or None
        when this read is not one to serve here (see the module doc)."""
        if not self._usable():
            return None
        now = time.monotonic()
        self._sweep(now)
        follow = self._follow((topic, partition), start, now)
        if follow is None:
            return None
        follow.busy = True
        try:
            if not follow.buffer and not follow.failed:
                follow.news.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        await follow.news.wait()
            if follow.error is not None:
                error, follow.error = follow.error, None
                raise translate(error, f"read {topic}[{partition}]")
            if follow.failed and not follow.buffer:
                self._drop((topic, partition))
                return None
            batch = follow.take(max(1, max_records))
        finally:
            follow.busy = False
            follow.read_at = time.monotonic()
        if batch:
            follow.next = batch[-1].position + 1
        if follow.paused and follow.size < self._buffer_bytes // 2:
            follow.paused = False
            self._send("resume", (topic, partition))
        return batch

    def _usable(self) -> bool:
        """False once the consumer broke, or from another event loop than the thread's (a
        store used by one ``asyncio.run`` after another): those reads go elsewhere."""
        if self._broken or (self._thread is not None and not self._thread.is_alive()):
            return False
        return self._loop is None or self._loop is asyncio.get_running_loop()

    def forget(self, topic: str) -> None:
        """Stop following the partitions of ``topic`` (deleted)."""
        for key in [k for k in self._follows if k[0] == topic]:
            self._drop(key)

    async def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join)
        self._follows.clear()

    def ended(self, topic: str, partition: int, start: int, got: list[Stored]) -> bool:
        """After a read elsewhere (from ``start``, ``got`` read): True when it was the second
        in sequence and the partition is followed from where it ended on."""
        key, end = (topic, partition), got[-1].position + 1 if got else start
        if key in self._follows or not self._usable():
            return False
        if self._ended.pop(key, None) != start:
            self._ended[key] = end
            while len(self._ended) > ENDED_KEPT:
                del self._ended[next(iter(self._ended))]
            return False
        if sum(f.size for f in self._follows.values()) >= self._budget_bytes:
            return False
        self._start_thread()
        gen = next(self._gens)
        now = time.monotonic()
        self._follows[key] = _Follow(next=end, gen=gen, expect=end, read_at=now)
        self._send("assign", key, end, gen)
        return True

    def _follow(self, key: Key, start: int, now: float) -> _Follow | None:
        follow = self._follows.get(key)
        if follow is None or follow.busy:
            return None
        if follow.next != start:
            if now - follow.read_at >= self._reseek_s:
                self._drop(key)  # nobody reads where it stands: this read's sequence may
            return None
        return follow

    def _drop(self, key: Key) -> None:
        follow = self._follows.pop(key)
        follow.news.set()  # a read waiting on it finds nothing and goes elsewhere next time
        self._send("unassign", key)

    def _sweep(self, now: float) -> None:
        if now - self._swept_at < min(5.0, self._idle_s):
            return
        self._swept_at = now
        for key, follow in list(self._follows.items()):
            if not follow.busy and now - follow.read_at >= self._idle_s:
                self._drop(key)

    def _send(self, op: str, key: Key, position: int = 0, gen: int = 0) -> None:
        self._commands.put((op, key, position, gen))

    def _start_thread(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="httpbus-kafka-follow", daemon=True)
        self._thread.start()

    # --- on the event loop: what the thread fetched -------------------------------------

    def _arrived(self, fetched: _Fetched) -> None:
        for key, gen, batch in fetched.batches:
            follow = self._follows.get(key)
            if follow is None or follow.gen != gen:
                continue
            fresh = [m for m in batch if m.position >= follow.expect]
            if not fresh:
                continue
            follow.buffer.extend(fresh)
            follow.size += sum(_size(m) for m in fresh)
            follow.expect = fresh[-1].position + 1
            follow.news.set()
            if not follow.paused and follow.size >= self._buffer_bytes:
                follow.paused = True
                self._send("pause", key)
        for key, gen in fetched.failed:
            follow = self._follows.get(key)
            if follow is not None and follow.gen == gen:
                follow.failed = True
                follow.news.set()
        for error in fetched.errors:
            for follow in self._follows.values():
                if follow.busy:
                    follow.error = error
                    follow.news.set()

    def _broke(self) -> None:
        self._broken = True
        for follow in self._follows.values():
            follow.failed = True
            follow.news.set()

    # --- on the thread ------------------------------------------------------------------

    def _run(self) -> None:
        loop = self._loop
        assert loop is not None
        try:
            consumer = Consumer(self._settings.follower())
        except KafkaException:
            loop.call_soon_threadsafe(self._broke)
            return
        gens: dict[Key, int] = {}
        known: set[str] = set()  # topics whose metadata the consumer has
        try:
            while not self._stop.is_set():
                self._apply(consumer, gens, known, loop)
                # consume(n, timeout) waits for all n or the timeout: the first by poll.
                first = consumer.poll(self._poll_s)
                if first is not None:
                    messages = [first, *consumer.consume(FETCHED_MAX - 1, 0)]
                    loop.call_soon_threadsafe(self._arrived, _sorted(messages, gens))
        except (KafkaException, RuntimeError):
            with contextlib.suppress(RuntimeError):  # the loop may be closed by now
                loop.call_soon_threadsafe(self._broke)
        finally:
            consumer.close()

    def _apply(
        self, consumer: Any, gens: dict[Key, int], known: set[str], loop: asyncio.AbstractEventLoop
    ) -> None:
        while True:
            try:
                op, key, position, gen = self._commands.get_nowait()
            except queue.Empty:
                return
            tp = TopicPartition(*key, position) if op == "assign" else TopicPartition(*key)
            try:
                if op == "assign":
                    if key[0] not in known:  # else its leader is looked up in a second
                        consumer.list_topics(key[0], timeout=self._settings.produce_timeout_s)
                        known.add(key[0])
                    consumer.incremental_assign([tp])
                    gens[key] = gen
                elif op == "unassign" and gens.pop(key, None) is not None:
                    consumer.incremental_unassign([tp])
                elif op == "pause" and key in gens:
                    consumer.pause([tp])
                elif op == "resume" and key in gens:
                    consumer.resume([tp])
            except KafkaException:
                failed = _Fetched(failed=[(key, gens.get(key, gen))])
                loop.call_soon_threadsafe(self._arrived, failed)


def _sorted(messages: list[Any], gens: dict[Key, int]) -> _Fetched:
    out = _Fetched()
    by_key: dict[Key, list[Stored]] = {}
    for msg in messages:
        error = msg.error()
        topic, partition = msg.topic(), msg.partition()
        key = (topic, partition) if topic is not None and partition is not None else None
        if error is None and key is not None:
            by_key.setdefault(key, []).append(stored(msg))
        elif error is not None and error.code() == KafkaError._PARTITION_EOF:
            continue
        elif error is not None and key is not None and partition >= 0:
            if key in gens:
                out.failed.append((key, gens[key]))
        elif error is not None:
            out.errors.append(error)
    out.batches = [(key, gens[key], batch) for key, batch in by_key.items() if key in gens]
    return out

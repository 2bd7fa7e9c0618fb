"""The durable produce path of the embedded store, with group commit.

Every ``produce`` call enqueues its records and awaits a future. One writer task drains the
queue: whatever accumulated while the previous transaction was committing goes into the next
one (up to ``max_batch_records``), so a hundred concurrent producers pay for a few fsyncs,
not a hundred. Each future is resolved only after that transaction's COMMIT returned, i.e.
after the WAL was fsynced (``synchronous=FULL``): the caller's 2xx is durable.

The fence: each transaction is ``BEGIN IMMEDIATE`` and reads ``topics.sealed`` after taking
the write lock, so once ``seal`` has committed no write from any connection of any process
can succeed; it gets ``SegmentFenced`` and nothing is stored.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from core.errors import HttpbusError, Malformed, NotFound, SegmentFenced

from ..protocol import Produced, Record, partition_for
from .config import EmbeddedSettings
from .errors import unavailable
from .schema import Database, encode_headers, immediate

log = logging.getLogger(__name__)

Result = Produced | Exception


@dataclass(frozen=True)
class _Row:
    """A record ready to insert, encoded on the event loop so bad input fails alone."""

    key: bytes | None
    value: bytes
    headers: bytes | None
    timestamp_ms: int | None
    partition: int | None


@dataclass
class _Pending:
    topic: str
    rows: list[_Row | Exception]
    future: asyncio.Future[list[Result]]
    write_by: float  # time.monotonic(): past it, the records are refused, not written


@dataclass
class _Topic:
    """A topic as one transaction sees it, after taking the write lock."""

    partitions: int
    sealed: bool
    next_position: dict[int, int]
    max_ts: dict[int, int | None]
    dirty: set[int] = field(default_factory=set)


class Producer:
    """Writes records durably through one writer task and one transaction per batch."""

    def __init__(
        self,
        db: Database,
        settings: EmbeddedSettings,
        clock: Callable[[], float],
        on_commit: Callable[[Iterable[str]], None],
    ) -> None:
        self._db = db
        self._settings = settings
        self._clock = clock
        self._on_commit = on_commit
        self._queue: asyncio.Queue[_Pending | None] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._round_robin: dict[str, int] = {}  # touched only on the writer thread
        self.transactions = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="httpbus-embedded-writer")

    async def close(self) -> None:
        """Write what is already queued, then stop the writer task."""
        task, self._task = self._task, None
        if task is None:
            return
        self._queue.put_nowait(None)
        done, _ = await asyncio.wait({task}, timeout=self._settings.produce_timeout_s)
        if not done:
            log.warning("embedded writer did not drain its queue in time")
            task.cancel()

    async def produce(self, topic: str, record: Record, partition: int | None) -> Produced:
        [result] = await self._submit(topic, [record], partition)
        if isinstance(result, Exception):
            raise result
        return result

    async def produce_many(self, topic: str, records: Sequence[Record]) -> list[Result]:
        return await self._submit(topic, records, None) if records else []

    async def _submit(
        self, topic: str, records: Sequence[Record], partition: int | None
    ) -> list[Result]:
        if self._task is None:
            raise unavailable("produce", "failed: the store is not started or closed")
        rows = [_encode(record, partition) for record in records]
        future: asyncio.Future[list[Result]] = asyncio.get_running_loop().create_future()
        write_by = time.monotonic() + self._settings.write_by_s
        self._queue.put_nowait(_Pending(topic, rows, future, write_by))
        timeout = self._settings.produce_timeout_s
        try:
            # On timeout the future is cancelled; the writer skips it if not yet written.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError as exc:
            raise unavailable("produce", f"was not committed in {timeout:g}s") from exc

    async def _run(self) -> None:
        while True:
            batch, stop = await self._next_batch()
            live = [p for p in batch if not p.future.done()]
            if live:
                await self._commit(live)
            if stop:
                return

    async def _next_batch(self) -> tuple[list[_Pending], bool]:
        first = await self._queue.get()
        if first is None:
            return [], True
        batch, size = [first], len(first.rows)
        while size < self._settings.max_batch_records and not self._queue.empty():
            item = self._queue.get_nowait()
            if item is None:
                return batch, True
            batch.append(item)
            size += len(item.rows)
        return batch, False

    async def _commit(self, batch: list[_Pending]) -> None:
        try:
            results = await self._db.run(
                lambda conn: self._write(conn, batch),
                timeout=self._settings.produce_timeout_s,
                what="produce",
            )
        except Exception as exc:  # the writer task must survive anything
            if not isinstance(exc, HttpbusError):
                log.exception("embedded writer failed")
            for pending in batch:
                if not pending.future.done():
                    pending.future.set_exception(exc)
            return
        self._on_commit({p.topic for p in batch})
        for pending, result in zip(batch, results, strict=True):
            if not pending.future.done():
                pending.future.set_result(result)

    def _write(self, conn: sqlite3.Connection, batch: list[_Pending]) -> list[list[Result]]:
        now_ms = int(self._clock() * 1000)
        topics: dict[str, _Topic | None] = {}
        with immediate(conn):
            late = time.monotonic()  # after the write lock, which may have been a long wait
            out = [
                _too_late(p) if p.write_by < late else self._write_pending(conn, p, topics, now_ms)
                for p in batch
            ]
            for name, topic in topics.items():
                if topic is not None and topic.dirty:
                    conn.executemany(
                        "UPDATE partition_ends SET next_position = ?, max_ts_ms = ?"
                        " WHERE topic = ? AND partition = ?",
                        [(topic.next_position[p], topic.max_ts[p], name, p) for p in topic.dirty],
                    )
        self.transactions += 1
        return out

    def _write_pending(
        self,
        conn: sqlite3.Connection,
        pending: _Pending,
        topics: dict[str, _Topic | None],
        now_ms: int,
    ) -> list[Result]:
        if pending.topic not in topics:
            topics[pending.topic] = _load(conn, pending.topic)
        topic = topics[pending.topic]
        if topic is None or topic.sealed:
            return [_refusal(pending.topic, topic) for _ in pending.rows]
        results: list[Result] = []
        inserts: list[tuple[object, ...]] = []
        for row in pending.rows:
            if isinstance(row, Exception):
                results.append(row)
                continue
            partition = self._partition(pending.topic, row, topic.partitions)
            if not 0 <= partition < topic.partitions:
                results.append(NotFound(f"{pending.topic} has no partition {partition}"))
                continue
            position = topic.next_position[partition]
            ts = now_ms if row.timestamp_ms is None else row.timestamp_ms
            previous = topic.max_ts[partition]
            ts_max = ts if previous is None else max(ts, previous)
            topic.next_position[partition] = position + 1
            topic.max_ts[partition] = ts_max
            topic.dirty.add(partition)
            inserts.append(
                (pending.topic, partition, position, ts, ts_max, row.key, row.value, row.headers)
            )
            results.append(Produced(partition, position, ts))
        conn.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?, ?)", inserts)
        return results

    def _partition(self, topic: str, row: _Row, partitions: int) -> int:
        if row.partition is not None:
            return row.partition
        if row.key is not None:
            return partition_for(row.key, partitions)
        counter = self._round_robin.get(topic, 0)
        self._round_robin[topic] = counter + 1
        return partition_for(None, partitions, counter)


def _encode(record: Record, partition: int | None) -> _Row | Exception:
    if not isinstance(record.value, bytes) or not isinstance(record.key, bytes | None):
        return Malformed("a record's value and key must be bytes")
    try:
        headers = encode_headers(record.headers)
    except HttpbusError as exc:
        return exc
    return _Row(record.key, record.value, headers, record.timestamp_ms, partition)


def _load(conn: sqlite3.Connection, name: str) -> _Topic | None:
    row = conn.execute("SELECT partitions, sealed FROM topics WHERE name = ?", (name,)).fetchone()
    if row is None:
        return None
    ends = conn.execute(
        "SELECT partition, next_position, max_ts_ms FROM partition_ends WHERE topic = ?", (name,)
    ).fetchall()
    return _Topic(
        partitions=row[0],
        sealed=bool(row[1]),
        next_position={p: n for p, n, _ in ends},
        max_ts={p: ts for p, _, ts in ends},
    )


def _too_late(pending: _Pending) -> list[Result]:
    return [unavailable("produce", "was not written in time") for _ in pending.rows]


def _refusal(name: str, topic: _Topic | None) -> Exception:
    if topic is None:
        return NotFound(f"storage topic {name} does not exist", details={"topic": name})
    return SegmentFenced(f"storage topic {name} is sealed", details={"topic": name})

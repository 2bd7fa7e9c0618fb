"""``EmbeddedSegmentStore``: the ``SegmentStore`` on one SQLite file (WAL, durable).

It is what ``httpbus dev`` runs on and what unit tests use. Several stores (processes) may
open the same file: SQLite's locks serialise their writes, the fence lives in the file, and
a reader sees the others' commits within ``poll_interval_s``.

Durability: ``synchronous=FULL`` in WAL mode; ``produce`` returns after the COMMIT that
fsynced its records, so an acknowledged message survives a power cut (see ``schema``).

Threads: one connection for writes and one for reads, each owned by its own thread, so the
event loop never blocks and reads never queue behind a group commit.

Retention is time-based, like Kafka's ``retention.ms``: every ``retention_interval_s`` a
background task deletes the messages whose timestamp (the running maximum along the
partition, so only a prefix is ever deleted) is older than the topic's ``retention_ms``;
``retention_ms <= 0`` keeps messages forever. Commits do not hold messages back, and
positions are never reused. The expired messages are gone; the file's pages are reused but
the file does not shrink (no VACUUM).

Example::

    async with EmbeddedSegmentStore(EmbeddedSettings(path=Path("dev.db"))) as store:
        await store.create_topic("orders.s1", 3, retention_ms=86_400_000)
        produced = await store.produce("orders.s1", Record(b"{}", key=b"customer-7"))
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from core.errors import AlreadyExists, HttpbusError, NotFound, ValidationFailed
from core.lifecycle import AsyncResource

from ..protocol import Fence, Produced, Record, Stored
from .config import EmbeddedSettings
from .consumer import Consumer
from .producer import Producer
from .schema import Database, immediate

log = logging.getLogger(__name__)

T = TypeVar("T")


class EmbeddedSegmentStore(AsyncResource):
    """The embedded ``SegmentStore``: durable, fenced, group-committed, on one SQLite file."""

    def __init__(self, settings: EmbeddedSettings, *, clock: Callable[[], float] = time.time):
        self._settings = settings
        self._clock = clock
        busy = settings.busy_timeout_ms
        self._writer = Database(settings.path, busy_timeout_ms=busy, role="writer")
        self._reader = Database(settings.path, busy_timeout_ms=busy, role="reader")
        self._consumer = Consumer(self._reader, settings)
        self._producer = Producer(self._writer, settings, clock, self._consumer.notify)
        self._retention: asyncio.Task[None] | None = None
        self._started = False

    @property
    def write_transactions(self) -> int:
        """How many produce transactions this store committed (group commit: fewer than
        the messages produced under concurrency)."""
        return self._producer.transactions

    async def start(self) -> None:
        """Open the file (creating it and its tables if needed); ``StorageUnavailable`` if
        it cannot be opened for writing."""
        if self._started:
            return
        timeout = self._settings.produce_timeout_s
        try:
            await self._writer.open(timeout=timeout, create_schema=True)
            await self._reader.open(timeout=timeout)
        except BaseException:
            await self._writer.close(timeout=timeout)
            await self._reader.close(timeout=timeout)
            raise
        self._producer.start()
        self._consumer.start()
        self._retention = asyncio.create_task(self._retain(), name="httpbus-embedded-retention")
        self._started = True

    async def aclose(self) -> None:
        """Finish the queued writes, stop the background tasks, close the file."""
        if not self._started:
            return
        self._started = False
        if self._retention is not None:
            self._retention.cancel()
            await asyncio.wait({self._retention}, timeout=self._settings.produce_timeout_s)
        await self._producer.close()
        await self._consumer.close()
        await self._writer.close(timeout=self._settings.produce_timeout_s)
        await self._reader.close(timeout=self._settings.produce_timeout_s)

    async def create_topic(self, name: str, partitions: int, *, retention_ms: int) -> None:
        if partitions < 1:
            raise ValidationFailed("partitions must be at least 1", details={"field": "partitions"})
        await self._write(lambda conn: _create(conn, name, partitions, retention_ms), "create")

    async def delete_topic(self, name: str) -> None:
        await self._write(lambda conn: _delete(conn, name), "delete")

    async def partitions(self, name: str) -> int | None:
        return await self._consumer.partitions(name)

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        return await self._producer.produce(name, record, partition)

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        """All records in one transaction; a record's key decides its partition."""
        return await self._producer.produce_many(name, records)

    async def read(
        self,
        name: str,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 1.0,
    ) -> list[Stored]:
        return await self._consumer.read(name, partition, start, max_records, timeout)

    async def end_positions(self, name: str) -> dict[int, int]:
        return await self._consumer.end_positions(name)

    async def last_positions(self, name: str) -> dict[int, int]:
        return await self._consumer.last_positions(name)

    async def seal(self, name: str, *, settle_s: float | None = None) -> dict[int, int]:
        return await self._write(lambda conn: _seal(conn, name), "seal")

    async def fence(self, name: str) -> Fence:
        return Fence(await self.seal(name), final=True)  # one SQLite transaction

    async def is_sealed(self, name: str) -> bool:
        return await self._consumer.is_sealed(name)

    async def position_at(self, name: str, partition: int, timestamp_ms: int) -> int:
        return await self._consumer.position_at(name, partition, timestamp_ms)

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        await self._write(lambda conn: _commit(conn, name, group, positions), "commit")

    async def committed(self, name: str, group: str) -> dict[int, int]:
        return await self._consumer.committed(name, group)

    async def backlog(
        self, name: str, group: str, committed: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        return await self._consumer.backlog(
            name, group
        )  # one local query: no need of ``committed``

    async def enforce_retention(self) -> int:
        """Delete the expired messages of every topic now; the number deleted."""
        now_ms = int(self._clock() * 1000)
        return await self._write(lambda conn: _expire(conn, now_ms), "retention")

    async def _retain(self) -> None:
        while self._started:
            await asyncio.sleep(self._settings.retention_interval_s)
            try:
                await self.enforce_retention()
            except HttpbusError as exc:
                log.warning("embedded store: retention pass failed: %s", exc)

    async def _write(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        # On the writer connection: serialised with the produce batches, in order.
        return await self._writer.run(fn, timeout=self._settings.produce_timeout_s, what=what)


def _exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM topics WHERE name = ?", (name,)).fetchone() is not None


def _not_found(name: str) -> NotFound:
    return NotFound(f"storage topic {name} does not exist", details={"topic": name})


def _create(conn: sqlite3.Connection, name: str, partitions: int, retention_ms: int) -> None:
    with immediate(conn):
        if _exists(conn, name):
            raise AlreadyExists(f"storage topic {name} exists", details={"topic": name})
        conn.execute(
            "INSERT INTO topics (name, partitions, retention_ms) VALUES (?, ?, ?)",
            (name, partitions, retention_ms),
        )
        conn.executemany(
            "INSERT INTO partition_ends (topic, partition) VALUES (?, ?)",
            [(name, p) for p in range(partitions)],
        )


def _delete(conn: sqlite3.Connection, name: str) -> None:
    with immediate(conn):
        if not _exists(conn, name):
            raise _not_found(name)
        for table, column in (
            ("messages", "topic"),
            ("commits", "topic"),
            ("partition_ends", "topic"),
            ("topics", "name"),
        ):
            conn.execute(f"DELETE FROM {table} WHERE {column} = ?", (name,))


def _seal(conn: sqlite3.Connection, name: str) -> dict[int, int]:
    """Set the fence and fix the end positions, in one IMMEDIATE transaction: a produce
    transaction either committed before it (and is inside the ends) or sees the fence."""
    with immediate(conn):
        row = conn.execute("SELECT sealed_ends FROM topics WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _not_found(name)
        if row[0] is not None:
            return {int(p): end for p, end in json.loads(row[0]).items()}
        ends = {
            int(p): int(end)
            for p, end in conn.execute(
                "SELECT partition, next_position FROM partition_ends WHERE topic = ?", (name,)
            )
        }
        conn.execute(
            "UPDATE topics SET sealed = 1, sealed_ends = ? WHERE name = ?", (json.dumps(ends), name)
        )
    return ends


def _commit(conn: sqlite3.Connection, name: str, group: str, positions: dict[int, int]) -> None:
    with immediate(conn):
        row = conn.execute("SELECT partitions FROM topics WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise _not_found(name)
        if any(not 0 <= p < row[0] for p in positions):
            raise NotFound(f"{name} has no partition among {sorted(positions)}")
        conn.executemany(
            "INSERT INTO commits (topic, grp, partition, position) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (topic, grp, partition) DO UPDATE SET position = excluded.position",
            [(name, group, p, pos) for p, pos in positions.items()],
        )


def _expire(conn: sqlite3.Connection, now_ms: int) -> int:
    """One short transaction per topic, so producers wait for one topic's deletes at most."""
    deleted = 0
    topics = conn.execute(
        "SELECT name, partitions, retention_ms FROM topics WHERE retention_ms > 0"
    ).fetchall()
    for name, partitions, retention_ms in topics:
        with immediate(conn):
            for partition in range(partitions):
                deleted += conn.execute(
                    "DELETE FROM messages WHERE topic = ? AND partition = ? AND ts_max < ?",
                    (name, partition, now_ms - retention_ms),
                ).rowcount
    return deleted

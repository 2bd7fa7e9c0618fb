"""The SQLite file of the embedded store: its tables, its pragmas, and the thread that owns
each connection.

Durability: every connection runs ``journal_mode=WAL`` with ``synchronous=FULL``, so COMMIT
returns only after the transaction is fsynced to the WAL. A produce answered 2xx therefore
survives a power cut, not only a crash of the process (``NORMAL`` would lose the last
transactions on power loss).

Tables:

- ``topics(name, partitions, retention_ms, sealed, sealed_ends)``: ``sealed_ends`` is the
  JSON of the end positions fixed by ``seal``.
- ``partition_ends(topic, partition, next_position, max_ts_ms)``: the next position of each
  partition and the running maximum of its timestamps. Positions come from this counter,
  not from ``max(position) + 1``, because retention may delete every message of a
  partition and positions must still never be reused.
- ``messages(topic, partition, position, ts_ms, ts_max, key, value, headers)``: positions are
  dense from 0. ``ts_max`` is the running maximum of ``ts_ms`` up to this message, so it never
  decreases along a partition: the first message with ``ts_max >= t`` is exactly the first
  message with ``ts_ms >= t``, which makes ``position_at`` and retention one index seek
  (``messages_by_time``) even when producers give timestamps out of order.
- ``commits(topic, grp, partition, position)``.
"""

from __future__ import annotations

import asyncio
import sqlite3
import struct
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import TypeVar

from core.errors import HttpbusError, Malformed

from ..protocol import Headers
from .errors import translate, unavailable

T = TypeVar("T")

SCHEMA_VERSION = 1

DDL = """
CREATE TABLE IF NOT EXISTS topics (
    name TEXT PRIMARY KEY,
    partitions INTEGER NOT NULL CHECK (partitions > 0),
    retention_ms INTEGER NOT NULL,
    sealed INTEGER NOT NULL DEFAULT 0,
    sealed_ends TEXT
);
CREATE TABLE IF NOT EXISTS partition_ends (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    next_position INTEGER NOT NULL DEFAULT 0,
    max_ts_ms INTEGER,
    PRIMARY KEY (topic, partition)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS messages (
    topic TEXT NOT NULL,
    partition INTEGER NOT NULL,
    position INTEGER NOT NULL,
    ts_ms INTEGER NOT NULL,
    ts_max INTEGER NOT NULL,
    key BLOB,
    value BLOB NOT NULL,
    headers BLOB,
    PRIMARY KEY (topic, partition, position)
);
CREATE INDEX IF NOT EXISTS messages_by_time ON messages (topic, partition, ts_max, position);
CREATE TABLE IF NOT EXISTS commits (
    topic TEXT NOT NULL,
    grp TEXT NOT NULL,
    partition INTEGER NOT NULL,
    position INTEGER NOT NULL,
    PRIMARY KEY (topic, grp, partition)
) WITHOUT ROWID;
"""

_LEN = struct.Struct(">I")


def encode_headers(headers: Headers) -> bytes | None:
    """Headers as one blob, reversibly: per header, the length and UTF-8 of the name, then
    the length and bytes of the value. No headers: NULL."""
    if not headers:
        return None
    parts: list[bytes] = []
    try:
        for name, value in headers:
            raw = name.encode()
            parts += (_LEN.pack(len(raw)), raw, _LEN.pack(len(value)), bytes(value))
    except (AttributeError, TypeError, ValueError, struct.error) as exc:
        raise Malformed(f"headers must be (str, bytes) pairs: {exc}") from exc
    return b"".join(parts)


def decode_headers(blob: bytes | None) -> Headers:
    """The inverse of :func:`encode_headers`."""
    out: list[tuple[str, bytes]] = []
    at = 0
    while blob and at < len(blob):
        (size,) = _LEN.unpack_from(blob, at)
        name = blob[at + 4 : at + 4 + size].decode()
        at += 4 + size
        (size,) = _LEN.unpack_from(blob, at)
        out.append((name, blob[at + 4 : at + 4 + size]))
        at += 4 + size
    return tuple(out)


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A write transaction that takes the write lock first (``BEGIN IMMEDIATE``), so what it
    reads (the fence, the next positions) cannot change before it commits."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        with suppress(sqlite3.Error):
            conn.rollback()
        raise
    conn.execute("COMMIT")


class Database:
    """One SQLite connection and the single thread that owns it.

    sqlite3 connections must not be used from two threads at once: every call runs on this
    connection's own one-thread executor, in submission order, never on the event loop.
    Each call is bounded by ``timeout``; a call that overruns raises ``StorageUnavailable``
    (the thread finishes it in the background).
    """

    def __init__(self, path: Path, *, busy_timeout_ms: int, role: str) -> None:
        self._path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._role = role
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def open(self, *, timeout: float, create_schema: bool = False) -> None:
        """Open the file (creating it, its folder and, if asked, its tables)."""
        self._executor = ThreadPoolExecutor(1, thread_name_prefix=f"httpbus-sqlite-{self._role}")
        await self.run(lambda _: None, timeout=timeout, what="open", connect=create_schema)

    async def run(
        self,
        fn: Callable[[sqlite3.Connection], T],
        *,
        timeout: float,
        what: str,
        connect: bool | None = None,
    ) -> T:
        """Run ``fn(connection)`` on the connection's thread and return its result."""
        if self._executor is None:
            raise unavailable(what, "failed: the store is not started or already closed")
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, self._call, fn, what, connect)
        except RuntimeError as exc:  # the executor was shut down under us
            raise unavailable(what, "failed: the store is closed") from exc
        try:
            # asyncio.timeout, not wait_for: on 3.11 wait_for may swallow a cancellation.
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError as exc:
            raise unavailable(what, f"did not complete in {timeout:g}s") from exc

    async def close(self, *, timeout: float) -> None:
        """Close the connection on its thread, then stop the thread."""
        if self._executor is None:
            return
        with suppress(HttpbusError):
            await self.run(self._disconnect, timeout=timeout, what="close")
        self._executor.shutdown(wait=False)
        self._executor = None

    def _call(self, fn: Callable[[sqlite3.Connection], T], what: str, connect: bool | None) -> T:
        try:
            if connect is not None:
                self._conn = self._connect(connect)
            if self._conn is None:
                raise unavailable(what, "failed: the store is closed")
            return fn(self._conn)
        except sqlite3.Error as exc:
            if self._conn is not None and self._conn.in_transaction:
                with suppress(sqlite3.Error):
                    self._conn.rollback()
            raise translate(exc, what) from exc
        except OSError as exc:
            raise unavailable(what, f"failed: {exc}") from exc

    def _connect(self, create_schema: bool) -> sqlite3.Connection:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; writers say BEGIN IMMEDIATE.
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=True)
        try:
            conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            if create_schema:
                with immediate(conn):
                    # One statement at a time: executescript would COMMIT our transaction.
                    for statement in DDL.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _disconnect(self, conn: sqlite3.Connection) -> None:
        conn.close()
        self._conn = None

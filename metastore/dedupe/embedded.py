"""The dedupe rows in one SQLite file (WAL), for ``httpbus dev`` and the unit tests.

Shaped like the PostgreSQL table (:mod:`metastore.dedupe.postgres`): rows are kept in one
table per ``partition_s`` of ``until_ms`` (``dedupe_<start>_<end>``, made when first needed)
and a table is dropped whole once every row in it is past its ``until_ms``. Several stores,
in one process or many (``processes: N``), may open one file: each write is one ``BEGIN
IMMEDIATE`` transaction. All SQLite work runs on one thread per store, so the event loop
never blocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from core.errors import StorageUnavailable
from core.lifecycle import AsyncResource

from .protocol import Entry, Place, RowKey, Swap

T = TypeVar("T")
_PART = re.compile(r"^dedupe_(\d+)_(\d+)$")
_COLUMNS = """(scope TEXT NOT NULL, message_id TEXT NOT NULL, bucket_ms INTEGER NOT NULL,
    until_ms INTEGER NOT NULL, at_ms INTEGER NOT NULL, owner TEXT NOT NULL,
    stamp INTEGER NOT NULL, segment INTEGER, partition INTEGER, position INTEGER,
    PRIMARY KEY (scope, message_id, bucket_ms, until_ms)) WITHOUT ROWID"""
_WHERE = "scope = ? AND message_id = ? AND bucket_ms = ? AND until_ms = ?"


class EmbeddedDedupeTable(AsyncResource):
    """The rows in the SQLite file at ``path``."""

    def __init__(self, path: str, *, partition_s: int = 3_600, busy_timeout_s: float = 10.0):
        self.path = path
        self.partition_ms = partition_s * 1000
        self.busy_timeout_s = busy_timeout_s
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    async def start(self) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="dedupe")
        await self._run(self._open)

    def _open(self) -> None:
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(
            self.path, timeout=self.busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        self._conn.execute("PRAGMA journal_mode=WAL")

    async def aclose(self) -> None:
        if self._pool is None:
            return
        if self._conn is not None:
            await self._run(self._conn.close)
        self._pool.shutdown(wait=True)
        self._pool = None

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        assert self._pool is not None, "the dedupe table is not started"
        try:
            return await asyncio.get_running_loop().run_in_executor(
                self._pool, functools.partial(fn, *args)
            )
        except sqlite3.Error as exc:
            raise StorageUnavailable(f"the embedded dedupe store failed: {exc}") from exc

    def _write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` in one write transaction (rolled back if it raises)."""
        assert self._conn is not None
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                conn.execute("ROLLBACK")
            raise
        return result

    def _table(self, conn: sqlite3.Connection, until_ms: int, create: bool) -> str | None:
        start = until_ms // self.partition_ms * self.partition_ms
        name = f"dedupe_{start}_{start + self.partition_ms}"
        if create:
            conn.execute(f"CREATE TABLE IF NOT EXISTS {name} {_COLUMNS}")
            return name
        exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
        return name if exists else None

    # ------------------------------------------------------------ rows
    async def write(
        self,
        inserts: Sequence[tuple[RowKey, Entry]],
        places: Sequence[tuple[RowKey, int, int, Place]],
    ) -> tuple[dict[RowKey, int], dict[RowKey, int]]:
        def run(conn: sqlite3.Connection) -> tuple[dict[RowKey, int], dict[RowKey, int]]:
            return self._insert(conn, inserts), self._place(conn, places)

        return await self._run(self._write, run)

    def _insert(
        self, conn: sqlite3.Connection, rows: Sequence[tuple[RowKey, Entry]]
    ) -> dict[RowKey, int]:
        inserted: dict[RowKey, int] = {}
        for key, e in rows:
            table = self._table(conn, key.until_ms, create=True)
            cursor = conn.execute(
                f"INSERT INTO {table} (scope, message_id, bucket_ms, until_ms, at_ms, owner,"
                " stamp) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*key, e.at_ms, e.owner, e.stamp),
            )
            if cursor.rowcount == 1:
                inserted[key] = e.stamp
        return inserted

    async def read(self, keys: Sequence[RowKey]) -> dict[RowKey, Entry]:
        def run() -> dict[RowKey, Entry]:
            assert self._conn is not None
            found: dict[RowKey, Entry] = {}
            for key in keys:
                table = self._table(self._conn, key.until_ms, create=False)
                row = None
                if table is not None:
                    query = f"SELECT at_ms, owner, stamp, segment, partition, position FROM {table}"
                    row = self._conn.execute(f"{query} WHERE {_WHERE}", key).fetchone()
                if row is not None:
                    at_ms, owner, stamp, segment, partition, position = row
                    place = None if segment is None else Place(segment, partition, position)
                    found[key] = Entry(at_ms, owner, stamp, place)
            return found

        return await self._run(run)

    def _place(
        self, conn: sqlite3.Connection, rows: Sequence[tuple[RowKey, int, int, Place]]
    ) -> dict[RowKey, int]:
        return {
            key: new
            for key, stamp, new, p in rows
            if _change(
                conn,
                self._table(conn, key.until_ms, create=True),
                "SET stamp = ?, segment = ?, partition = ?, position = ?",
                (new, *p),
                key,
                stamp,
            )
        }

    async def delete(self, rows: Sequence[tuple[RowKey, int]]) -> dict[RowKey, int]:
        def run(conn: sqlite3.Connection) -> dict[RowKey, int]:
            return {key: stamp for key, stamp in rows if self._delete_one(conn, key, stamp)}

        return await self._run(self._write, run)

    def _delete_one(self, conn: sqlite3.Connection, key: RowKey, stamp: int) -> bool:
        table = self._table(conn, key.until_ms, create=True)
        cursor = conn.execute(f"DELETE FROM {table} WHERE {_WHERE} AND stamp = ?", (*key, stamp))
        return cursor.rowcount == 1

    async def swap(self, swaps: Sequence[Swap]) -> bool:
        def run(conn: sqlite3.Connection) -> bool:
            if all(self._swap_one(conn, swap) for swap in swaps):
                return True
            raise _Lost

        try:
            return await self._run(self._write, run)
        except _Lost:
            return False

    def _swap_one(self, conn: sqlite3.Connection, swap: Swap) -> bool:
        key, new = swap.key, swap.new
        table = self._table(conn, key.until_ms, create=True)
        if new is None:
            assert swap.expected is not None
            return self._delete_one(conn, key, swap.expected)
        if swap.expected is None:
            cursor = conn.execute(
                f"INSERT INTO {table} (scope, message_id, bucket_ms, until_ms, at_ms, owner, "
                "stamp) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (*key, new.at_ms, new.owner, new.stamp),
            )
            return cursor.rowcount == 1
        values = (new.at_ms, new.owner, new.stamp)
        sets = (
            "SET at_ms = ?, owner = ?, stamp = ?, segment = NULL, partition = NULL, position = NULL"
        )
        return _change(conn, table, sets, values, key, swap.expected)

    async def expire(self, now_ms: int) -> int:
        def run(conn: sqlite3.Connection) -> int:
            names = [
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            gone = [n for n, m in _parts(names) if int(m[2]) <= now_ms]
            for name in gone:
                conn.execute(f"DROP TABLE {name}")
            return len(gone)

        return await self._run(self._write, run)


class _Lost(Exception):
    """A compare-and-set of a swap failed: the transaction is rolled back."""


def _change(
    conn: sqlite3.Connection,
    table: str | None,
    sets: str,
    values: tuple[Any, ...],
    key: RowKey,
    stamp: int,
) -> bool:
    cursor = conn.execute(
        f"UPDATE {table} {sets} WHERE {_WHERE} AND stamp = ?", (*values, *key, stamp)
    )
    return cursor.rowcount == 1


def _parts(names: Iterable[str]) -> list[tuple[str, re.Match[str]]]:
    return [(n, m) for n in names if (m := _PART.match(n)) is not None]

"""The dedupe rows in PostgreSQL (production): ``dedupe_ids``, partitioned by range of
``until_ms`` (migrations/versions/0006_dedupe_ids.py makes the parent table; ``httpbus db
upgrade``).

Each statement carries the rows of many publishes as arrays (``unnest``), so one round trip
claims a whole batch: ``INSERT … ON CONFLICT DO NOTHING RETURNING``. Partitions cover
``partition_s`` of ``until_ms`` each; one is made when a row first needs it, and dropped
whole once every row in it is past its ``until_ms`` (no claim reads it any more). Schema
changes are serialised across producers by an advisory lock.

psycopg 3 (already the relational store's driver) on a few autocommit connections, one
statement at a time each; its errors become ``StorageUnavailable`` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import psycopg

from core.errors import StorageUnavailable
from core.lifecycle import AsyncResource

from .protocol import Entry, Place, RowKey, Swap

log = logging.getLogger(__name__)
TABLE = "dedupe_ids"
_LOCK = 0x6874_7462_7573  # pg_advisory_lock key of the partitions' DDL ("httbus")
_PART = re.compile(rf"^{TABLE}_(\d+)_(\d+)$")
_KEYS = "%s::text[], %s::text[], %s::bigint[], %s::bigint[]"
_MATCH = (
    "d.scope = u.scope AND d.message_id = u.message_id AND d.bucket_ms = u.bucket_ms "
    "AND d.until_ms = u.until_ms"
)
_RETURNING = "RETURNING d.scope, d.message_id, d.bucket_ms, d.until_ms, d.stamp"

_INSERT = f"""
INSERT INTO {TABLE} AS d (scope, message_id, bucket_ms, until_ms, at_ms, owner, stamp)
SELECT * FROM unnest({_KEYS}, %s::bigint[], %s::text[], %s::bigint[])
ON CONFLICT DO NOTHING {_RETURNING}"""
_READ = f"""
SELECT d.scope, d.message_id, d.bucket_ms, d.until_ms, d.at_ms, d.owner, d.stamp,
       d.segment, d.partition, d.position
FROM {TABLE} d JOIN unnest({_KEYS}) AS u(scope, message_id, bucket_ms, until_ms) ON {_MATCH}"""
_PLACE = f"""
UPDATE {TABLE} AS d SET stamp = u.new, segment = u.segment, partition = u.partition,
       position = u.position
FROM unnest({_KEYS}, %s::bigint[], %s::bigint[], %s::int[], %s::int[], %s::bigint[])
     AS u(scope, message_id, bucket_ms, until_ms, stamp, new, segment, partition, position)
WHERE {_MATCH} AND d.stamp = u.stamp {_RETURNING}"""
_WRITE = f"""
WITH inserted AS ({_INSERT}), placed AS ({_PLACE})
SELECT true, * FROM inserted UNION ALL SELECT false, * FROM placed"""
_DELETE = f"""
DELETE FROM {TABLE} AS d USING unnest({_KEYS}, %s::bigint[])
     AS u(scope, message_id, bucket_ms, until_ms, stamp)
WHERE {_MATCH} AND d.stamp = u.stamp {_RETURNING}"""
_PARTITIONS = f"""
SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = '{TABLE}'::regclass"""


def _texts(values: Iterable[str]) -> str:
    """An array literal of ``values`` (one parameter, not one per element: psycopg adapts
    a list element by element in Python, which cost more than the statement itself)."""
    return (
        "{"
        + ",".join('"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"' for v in values)
        + "}"
    )


def _ints(values: Iterable[int]) -> str:
    return "{" + ",".join(map(str, values)) + "}"


def _columns(keys: Sequence[RowKey]) -> list[str]:
    return [
        _texts(k.scope for k in keys),
        _texts(k.message_id for k in keys),
        _ints(k.bucket_ms for k in keys),
        _ints(k.until_ms for k in keys),
    ]


def _write_statement(
    inserts: Sequence[tuple[RowKey, Entry]], places: Sequence[tuple[RowKey, int, int, Place]]
) -> tuple[str, list[str]]:
    """The statement of :meth:`PostgresDedupeTable.write`: the inserts, the places, or both
    in one (data-modifying CTEs), and its parameters."""
    params: list[str] = []
    if inserts:
        params += [
            *_columns([key for key, _ in inserts]),
            _ints(e.at_ms for _, e in inserts),
            _texts(e.owner for _, e in inserts),
            _ints(e.stamp for _, e in inserts),
        ]
    if places:
        params += [
            *_columns([key for key, _, _, _ in places]),
            _ints(stamp for _, stamp, _, _ in places),
            _ints(new for _, _, new, _ in places),
            _ints(p.segment for _, _, _, p in places),
            _ints(p.partition for _, _, _, p in places),
            _ints(p.position for _, _, _, p in places),
        ]
    statement = _WRITE if inserts and places else _INSERT if inserts else _PLACE
    return statement, params


def _key(row: Sequence[Any]) -> RowKey:
    return RowKey(row[0], row[1], row[2], row[3])


def _stamps(rows: Sequence[Sequence[Any]]) -> dict[RowKey, int]:
    return {_key(row): row[4] for row in rows}


class PostgresDedupeTable(AsyncResource):
    """``dedupe_ids`` at ``url`` (a libpq URL: ``postgresql://user@host:5432/db``)."""

    def __init__(self, url: str, *, connections: int = 4, partition_s: int = 3_600) -> None:
        self.url = url
        self.size = connections
        self.partition_ms = partition_s * 1000
        self._idle: asyncio.Queue[psycopg.AsyncConnection[Any]] = asyncio.Queue()
        self._opened: list[psycopg.AsyncConnection[Any]] = []
        self._made: set[int] = set()  # partition starts known to exist

    async def start(self) -> None:
        async with self._connection() as conn:
            found = await (await conn.execute("SELECT to_regclass(%s)", (TABLE,))).fetchone()
            if found is None or found[0] is None:
                raise StorageUnavailable(
                    f"the dedupe database has no {TABLE} table: run httpbus db upgrade on it"
                )

    async def aclose(self) -> None:
        for conn in self._opened:
            await conn.close()
        self._opened.clear()

    @contextlib.asynccontextmanager
    async def _connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """An idle connection (one opened when fewer than ``size`` exist); a connection
        that failed is closed, not reused; psycopg's errors as ``StorageUnavailable``."""
        if self._idle.empty() and len(self._opened) < self.size:
            try:
                conn = await psycopg.AsyncConnection.connect(self.url, autocommit=True)
            except psycopg.Error as exc:
                raise StorageUnavailable(f"the dedupe database does not answer: {exc}") from exc
            self._opened.append(conn)
        else:
            conn = await self._idle.get()
        try:
            yield conn
        except psycopg.Error as exc:
            if conn.closed or conn.broken:
                self._opened.remove(conn)
                await conn.close()
            else:
                self._idle.put_nowait(conn)
            raise StorageUnavailable(f"the dedupe database failed: {exc}") from exc
        except BaseException:
            self._opened.remove(conn)
            await conn.close()  # a statement interrupted half-way: start afresh
            raise
        else:
            self._idle.put_nowait(conn)

    # ------------------------------------------------------------ rows
    async def write(
        self,
        inserts: Sequence[tuple[RowKey, Entry]],
        places: Sequence[tuple[RowKey, int, int, Place]],
    ) -> tuple[dict[RowKey, int], dict[RowKey, int]]:
        if inserts:
            await self._partitions_for([key for key, _ in inserts])
        statement, params = _write_statement(inserts, places)
        async with self._connection() as conn:
            rows = await (await conn.execute(statement, params)).fetchall()
        if not places:
            return _stamps(rows), {}
        if not inserts:
            return {}, _stamps(rows)
        return _stamps([r[1:] for r in rows if r[0]]), _stamps([r[1:] for r in rows if not r[0]])

    async def read(self, keys: Sequence[RowKey]) -> dict[RowKey, Entry]:
        async with self._connection() as conn:
            rows = await (await conn.execute(_READ, _columns(keys))).fetchall()
        return {_key(r): _entry(r[4:]) for r in rows}

    async def delete(self, rows: Sequence[tuple[RowKey, int]]) -> dict[RowKey, int]:
        params = [*_columns([key for key, _ in rows]), _ints(stamp for _, stamp in rows)]
        async with self._connection() as conn:
            return _stamps(await (await conn.execute(_DELETE, params)).fetchall())

    async def swap(self, swaps: Sequence[Swap]) -> bool:
        await self._partitions_for([s.key for s in swaps if s.new is not None])
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    for swap in swaps:
                        if not await _swap_one(conn, swap):
                            raise _Lost
            except _Lost:
                return False
        return True

    # ------------------------------------------------------------ partitions
    async def _partitions_for(self, keys: Sequence[RowKey]) -> None:
        starts = {k.until_ms // self.partition_ms * self.partition_ms for k in keys}
        missing = starts - self._made
        if missing:
            await self._make(sorted(missing))

    async def _make(self, starts: list[int]) -> None:
        """Create the partitions beginning at ``starts`` unless some exist (under the lock:
        two producers never race on DDL). A range another partition size already covers is
        taken as made."""
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            existing = await self._ranges(conn)
            for start in starts:
                end = start + self.partition_ms
                if not any(lo < end and start < hi for lo, hi in existing):
                    await conn.execute(
                        f"CREATE TABLE {TABLE}_{start}_{end} PARTITION OF {TABLE} "
                        f"FOR VALUES FROM ({start}) TO ({end})"
                    )
        self._made.update(starts)

    async def _ranges(self, conn: psycopg.AsyncConnection[Any]) -> list[tuple[int, int]]:
        names = [row[0] for row in await (await conn.execute(_PARTITIONS)).fetchall()]
        return [(int(m[1]), int(m[2])) for m in map(_PART.match, names) if m is not None]

    async def expire(self, now_ms: int) -> int:
        """Drop the partitions whose every row is past its ``until_ms``: one statement per
        partition, whatever its number of rows."""
        dropped = 0
        async with self._connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            for lo, hi in await self._ranges(conn):
                if hi <= now_ms:
                    await conn.execute(f"DROP TABLE IF EXISTS {TABLE}_{lo}_{hi}")
                    self._made.discard(lo)
                    dropped += 1
        return dropped


class _Lost(Exception):
    """A compare-and-set of a swap failed: the transaction is rolled back."""


async def _swap_one(conn: psycopg.AsyncConnection[Any], swap: Swap) -> bool:
    key, new = swap.key, swap.new
    if swap.expected is None:
        assert new is not None
        cursor = await conn.execute(
            f"INSERT INTO {TABLE} (scope, message_id, bucket_ms, until_ms, at_ms, owner, stamp) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (*key, new.at_ms, new.owner, new.stamp),
        )
    elif new is None:
        cursor = await conn.execute(
            f"DELETE FROM {TABLE} WHERE scope = %s AND message_id = %s AND bucket_ms = %s "
            "AND until_ms = %s AND stamp = %s",
            (*key, swap.expected),
        )
    else:
        cursor = await conn.execute(
            f"UPDATE {TABLE} SET at_ms = %s, owner = %s, stamp = %s, segment = NULL, "
            "partition = NULL, position = NULL WHERE scope = %s AND message_id = %s "
            "AND bucket_ms = %s AND until_ms = %s AND stamp = %s",
            (new.at_ms, new.owner, new.stamp, *key, swap.expected),
        )
    return cursor.rowcount == 1


def _entry(row: Sequence[Any]) -> Entry:
    at_ms, owner, stamp, segment, partition, position = row
    place = None if segment is None else Place(segment, partition, position)
    return Entry(at_ms, owner, stamp, place)

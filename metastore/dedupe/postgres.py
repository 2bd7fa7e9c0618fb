"""The dedupe rows in PostgreSQL (production): ``dedupe_ids``, partitioned by range of
``until_ms`` (migrations/versions/0006_dedupe_ids.py makes the parent table; ``httpbus db
upgrade``).

Each statement carries the rows of many publishes as arrays (``unnest``), so one round trip
claims a whole batch: ``INSERT … ON CONFLICT DO NOTHING RETURNING``. Partitions cover
``partition_s`` of ``until_ms`` each; one is made when a row first needs it, and dropped
whole once every row in it is past its ``until_ms`` (no claim reads it any more). Every
statement names the partitions it touches (a partition's name follows from ``until_ms``), so
PostgreSQL never plans it over all of them. Schema changes are serialised across producers by
an advisory lock.

psycopg 3 (already the relational store's driver) on a few autocommit connections, one
statement at a time each; its errors become ``StorageUnavailable`` here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors as pg_errors

from core.errors import StorageUnavailable
from core.lifecycle import AsyncResource

from .protocol import Entry, Place, RowKey, Swap

log = logging.getLogger(__name__)
T = TypeVar("T")
TABLE = "dedupe_ids"
_LOCK = 0x6874_7462_7573  # pg_advisory_lock key of the partitions' DDL ("httbus")
_PART = re.compile(rf"^{TABLE}_(\d+)_(\d+)$")
_KEYS = "%s::text[], %s::text[], %s::bigint[], %s::bigint[]"
_MATCH = (
    "d.scope = u.scope AND d.message_id = u.message_id AND d.bucket_ms = u.bucket_ms "
    "AND d.until_ms = u.until_ms"
)
_RETURNING = "RETURNING d.scope, d.message_id, d.bucket_ms, d.until_ms, d.stamp"

# Each statement names one partition ({table}): through the parent, PostgreSQL plans an UPDATE
# or a join over every partition (50 partitions: 15 ms a statement instead of 0.6).
_INSERT = f"""
INSERT INTO {{table}} AS d (scope, message_id, bucket_ms, until_ms, at_ms, owner, stamp)
SELECT * FROM unnest({_KEYS}, %s::bigint[], %s::text[], %s::bigint[])
ON CONFLICT DO NOTHING RETURNING true, d.scope, d.message_id, d.bucket_ms, d.until_ms, d.stamp"""
_PLACE = f"""
UPDATE {{table}} AS d SET stamp = u.new, segment = u.segment, partition = u.partition,
       position = u.position
FROM unnest({_KEYS}, %s::bigint[], %s::bigint[], %s::int[], %s::int[], %s::bigint[])
     AS u(scope, message_id, bucket_ms, until_ms, stamp, new, segment, partition, position)
WHERE {_MATCH} AND d.stamp = u.stamp
RETURNING false, d.scope, d.message_id, d.bucket_ms, d.until_ms, d.stamp"""
_READ = f"""
SELECT d.scope, d.message_id, d.bucket_ms, d.until_ms, d.at_ms, d.owner, d.stamp,
       d.segment, d.partition, d.position
FROM {{table}} d JOIN unnest({_KEYS}) AS u(scope, message_id, bucket_ms, until_ms) ON {_MATCH}"""
_DELETE = f"""
DELETE FROM {{table}} AS d USING unnest({_KEYS}, %s::bigint[])
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


def _insert_params(rows: Sequence[tuple[RowKey, Entry]]) -> list[str]:
    return [
        *_columns([key for key, _ in rows]),
        _ints(e.at_ms for _, e in rows),
        _texts(e.owner for _, e in rows),
        _ints(e.stamp for _, e in rows),
    ]


def _place_params(rows: Sequence[tuple[RowKey, int, int, Place]]) -> list[str]:
    return [
        *_columns([key for key, _, _, _ in rows]),
        _ints(stamp for _, stamp, _, _ in rows),
        _ints(new for _, _, new, _ in rows),
        _ints(p.segment for _, _, _, p in rows),
        _ints(p.partition for _, _, _, p in rows),
        _ints(p.position for _, _, _, p in rows),
    ]


def _statement(parts: Sequence[tuple[str, list[str]]]) -> tuple[str, list[str]]:
    """Statements of the same columns as one (data-modifying CTEs: one round trip)."""
    if len(parts) == 1:
        return parts[0]
    ctes = ", ".join(f"c{i} AS ({sql})" for i, (sql, _) in enumerate(parts))
    union = " UNION ALL ".join(f"SELECT * FROM c{i}" for i in range(len(parts)))
    return f"WITH {ctes} {union}", [param for _, params in parts for param in params]


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
                conn = await _open(self.url)
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
    def _partition(self, until_ms: int) -> str:
        start = until_ms // self.partition_ms * self.partition_ms
        return f"{TABLE}_{start}_{start + self.partition_ms}"

    def _by_partition(self, items: Sequence[T], key: Callable[[T], RowKey]) -> dict[str, list[T]]:
        groups: dict[str, list[T]] = {}
        for item in items:
            groups.setdefault(self._partition(key(item).until_ms), []).append(item)
        return groups

    async def write(
        self,
        inserts: Sequence[tuple[RowKey, Entry]],
        places: Sequence[tuple[RowKey, int, int, Place]],
    ) -> tuple[dict[RowKey, int], dict[RowKey, int]]:
        await self._partitions_for([key for key, _ in inserts])
        parts = [
            (_INSERT.format(table=table), _insert_params(rows))
            for table, rows in self._by_partition(inserts, lambda row: row[0]).items()
        ] + [
            (_PLACE.format(table=table), _place_params(rows))
            for table, rows in self._by_partition(places, lambda row: row[0]).items()
        ]
        async with self._connection() as conn:
            found = await (await conn.execute(*_statement(parts))).fetchall()
        return _stamps([r[1:] for r in found if r[0]]), _stamps([r[1:] for r in found if not r[0]])

    async def read(self, keys: Sequence[RowKey]) -> dict[RowKey, Entry]:
        groups = self._by_partition(keys, lambda key: key)
        parts = {table: (_READ.format(table=table), _columns(g)) for table, g in groups.items()}
        return {_key(r): _entry(r[4:]) for r in await self._existing(parts)}

    async def delete(self, rows: Sequence[tuple[RowKey, int]]) -> dict[RowKey, int]:
        parts = {
            table: (
                _DELETE.format(table=table),
                [*_columns([k for k, _ in group]), _ints(s for _, s in group)],
            )
            for table, group in self._by_partition(rows, lambda row: row[0]).items()
        }
        return _stamps(await self._existing(parts))

    async def _existing(self, parts: dict[str, tuple[str, list[str]]]) -> list[tuple[Any, ...]]:
        """The rows of ``parts`` (a statement per partition) run as one; a partition that is
        gone (dropped: every row in it expired) has none."""
        async with self._connection() as conn:
            try:
                return await (await conn.execute(*_statement(list(parts.values())))).fetchall()
            except pg_errors.UndefinedTable:
                names = {f"{TABLE}_{lo}_{hi}" for lo, hi in await self._ranges(conn)}
                left = [part for table, part in parts.items() if table in names]
                if not left:
                    return []
                return await (await conn.execute(*_statement(left))).fetchall()

    async def swap(self, swaps: Sequence[Swap]) -> bool:
        await self._partitions_for([s.key for s in swaps if s.new is not None])
        async with self._connection() as conn:
            try:
                async with conn.transaction():
                    for swap in swaps:
                        if not await _swap_one(conn, self._partition(swap.key.until_ms), swap):
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
        """Create the partitions beginning at ``starts`` unless they exist (under the lock:
        two producers never race on DDL)."""
        async with self._connection() as conn, conn.transaction():
            # Durable, unlike the rows: a partition lost in a crash after it was cached in
            # _made would fail every write to it until the producer restarts.
            await conn.execute("SET LOCAL synchronous_commit = on")
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK,))
            existing = set(await self._ranges(conn))
            for start in starts:
                end = start + self.partition_ms
                if (start, end) not in existing:
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


# The settings of the dedupe connections (docs/capacity.md, "Idempotent publish"):
# - plan each statement for its parameters. psycopg prepares a statement run five times, and
#   PostgreSQL then keeps one plan for all parameters; a partition's statements first run while
#   it is new and empty, when that plan of a join on it is a scan. Measured: a write of 10
#   claims and 10 records took 3.7 ms at the median (p90 8.5) over a new partition's first
#   16,000 rows, 1.2 ms (p90 2.2) planned each time (~0.1 ms), until autovacuum's ANALYZE.
# - commit without waiting for the write-ahead log's flush: a claim's round trip no longer
#   includes an fsync. A crash of PostgreSQL (not of a producer) may lose the last ~0.6 s of
#   claims and records (3 x wal_writer_delay): a repeat of one of those ids within the window
#   is then stored again. Which of two racing claims wins is unaffected (the primary key
#   decides it in the running server), and so is the takeover of a dead producer's claim.
#   DDL stays durable (:meth:`PostgresDedupeTable._make`).
_SESSION = "SET plan_cache_mode = force_custom_plan; SET synchronous_commit = off"


async def _open(url: str) -> psycopg.AsyncConnection[Any]:
    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    await conn.execute(_SESSION)
    return conn


class _Lost(Exception):
    """A compare-and-set of a swap failed: the transaction is rolled back."""


async def _swap_one(conn: psycopg.AsyncConnection[Any], table: str, swap: Swap) -> bool:
    key, new = swap.key, swap.new
    if swap.expected is None:
        assert new is not None
        cursor = await conn.execute(
            f"INSERT INTO {table} (scope, message_id, bucket_ms, until_ms, at_ms, owner, stamp) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
            (*key, new.at_ms, new.owner, new.stamp),
        )
    elif new is None:
        cursor = await conn.execute(
            f"DELETE FROM {table} WHERE scope = %s AND message_id = %s AND bucket_ms = %s "
            "AND until_ms = %s AND stamp = %s",
            (*key, swap.expected),
        )
    else:
        cursor = await conn.execute(
            f"UPDATE {table} SET at_ms = %s, owner = %s, stamp = %s, segment = NULL, "
            "partition = NULL, position = NULL WHERE scope = %s AND message_id = %s "
            "AND bucket_ms = %s AND until_ms = %s AND stamp = %s",
            (new.at_ms, new.owner, new.stamp, *key, swap.expected),
        )
    return cursor.rowcount == 1


def _entry(row: Sequence[Any]) -> Entry:
    at_ms, owner, stamp, segment, partition, position = row
    place = None if segment is None else Place(segment, partition, position)
    return Entry(at_ms, owner, stamp, place)

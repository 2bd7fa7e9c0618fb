"""Reads of the embedded store: messages, positions, commits, and waiting for new data.

A ``read`` that finds nothing waits for its topic's wake-up event until its timeout:

- writes of this store (this process) set the event right after their COMMIT, so a local
  reader wakes at once;
- writes of other connections (other processes) are seen by one watcher task per store that
  polls ``PRAGMA data_version`` every ``poll_interval_s`` while somebody waits. The pragma
  costs no I/O and changes only when another connection committed, so a thousand waiting
  readers cost one cheap query per interval, not a thousand.

``position_at`` is one index seek on ``messages_by_time`` (see ``schema``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import sqlite3
from collections.abc import Callable, Iterable
from typing import TypeVar

from core.errors import HttpbusError, NotFound

from ..protocol import Stored
from .config import EmbeddedSettings
from .schema import Database, decode_headers

log = logging.getLogger(__name__)

T = TypeVar("T")


class Consumer:
    """Reads on their own connection and thread, so they never queue behind writes."""

    def __init__(self, db: Database, settings: EmbeddedSettings) -> None:
        self._db = db
        self._settings = settings
        self._events: dict[str, asyncio.Event] = {}
        self._waiting = 0
        self._someone_waits = asyncio.Event()
        self._watcher: asyncio.Task[None] | None = None
        self._closing = False

    def start(self) -> None:
        self._watcher = asyncio.create_task(self._watch(), name="httpbus-embedded-watcher")

    async def close(self) -> None:
        watcher, self._watcher = self._watcher, None
        self._closing = True
        self._someone_waits.set()
        if watcher is not None:
            watcher.cancel()
            await asyncio.wait({watcher}, timeout=self._settings.produce_timeout_s)
        self.notify(list(self._events))

    def notify(self, topics: Iterable[str]) -> None:
        """Wake the readers of ``topics``: new messages may be there."""
        for topic in topics:
            event = self._events.pop(topic, None)
            if event is not None:
                event.set()

    async def read(
        self, name: str, partition: int, start: int, max_records: int, timeout: float
    ) -> list[Stored]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            # Taken before the query: a commit between the query and the wait still wakes us.
            event = self._events.setdefault(name, asyncio.Event())
            found = await self._run(
                lambda conn: _select(conn, name, partition, start, max_records), "read"
            )
            remaining = deadline - loop.time()
            if found or remaining <= 0:
                return found
            await self._wait(event, remaining)

    async def _wait(self, event: asyncio.Event, timeout: float) -> None:
        self._waiting += 1
        self._someone_waits.set()
        try:
            async with asyncio.timeout(timeout):
                await event.wait()
        except TimeoutError:
            pass
        finally:
            self._waiting -= 1

    async def _watch(self) -> None:
        # Read before any reader waits: a stale value only causes a spurious wake-up.
        seen = await self._poll()
        while not self._closing:
            await self._someone_waits.wait()
            await asyncio.sleep(self._settings.poll_interval_s)
            version = await self._poll()
            if version is None or version != seen:
                self.notify(list(self._events))
            seen = version
            if self._waiting == 0:
                self._someone_waits.clear()

    async def _poll(self) -> int | None:
        try:
            return await self._run(_data_version, "poll")
        except HttpbusError as exc:
            log.warning("embedded store: polling for new data failed: %s", exc)
            return None

    async def partitions(self, name: str) -> int | None:
        row = await self._run(
            lambda conn: conn.execute(
                "SELECT partitions FROM topics WHERE name = ?", (name,)
            ).fetchone(),
            "describe",
        )
        return None if row is None else int(row[0])

    async def end_positions(self, name: str) -> dict[int, int]:
        return await self._run(lambda conn: _ends(conn, name), "end_positions")

    async def last_positions(self, name: str) -> dict[int, int]:
        return await self._run(lambda conn: _lasts(conn, name), "last_positions")

    async def is_sealed(self, name: str) -> bool:
        return await self._run(lambda conn: _topic(conn, name)[1] is not None, "is_sealed")

    async def position_at(self, name: str, partition: int, timestamp_ms: int) -> int:
        return await self._run(
            lambda conn: _position_at(conn, name, partition, timestamp_ms), "position_at"
        )

    async def committed(self, name: str, group: str) -> dict[int, int]:
        return await self._run(lambda conn: _committed(conn, name, group), "committed")

    async def backlog(self, name: str, group: str) -> dict[int, int]:
        return await self._run(lambda conn: _backlog(conn, name, group), "backlog")

    async def _run(self, fn: Callable[[sqlite3.Connection], T], what: str) -> T:
        return await self._db.run(fn, timeout=self._settings.produce_timeout_s, what=what)


def _topic(conn: sqlite3.Connection, name: str) -> tuple[int, str | None]:
    """The partition count and sealed ends (None: not sealed) of a topic, or NotFound."""
    row = conn.execute(
        "SELECT partitions, CASE WHEN sealed THEN sealed_ends END FROM topics WHERE name = ?",
        (name,),
    ).fetchone()
    if row is None:
        raise NotFound(f"storage topic {name} does not exist", details={"topic": name})
    return int(row[0]), row[1]


def _check_partition(conn: sqlite3.Connection, name: str, partition: int) -> None:
    partitions, _ = _topic(conn, name)
    if not 0 <= partition < partitions:
        raise NotFound(f"{name} has no partition {partition}", details={"topic": name})


def _select(
    conn: sqlite3.Connection, name: str, partition: int, start: int, limit: int
) -> list[Stored]:
    rows = conn.execute(
        "SELECT position, ts_ms, key, value, headers FROM messages"
        " WHERE topic = ? AND partition = ? AND position >= ? ORDER BY position LIMIT ?",
        (name, partition, start, limit),
    ).fetchall()
    if not rows:
        _check_partition(conn, name, partition)  # nothing there, or no such thing?
    return [
        Stored(partition, pos, ts, value, key, decode_headers(headers))
        for pos, ts, key, value, headers in rows
    ]


def _ends(conn: sqlite3.Connection, name: str) -> dict[int, int]:
    _, sealed_ends = _topic(conn, name)
    if sealed_ends is not None:
        return {int(p): int(end) for p, end in json.loads(sealed_ends).items()}
    rows = conn.execute(
        "SELECT partition, next_position FROM partition_ends WHERE topic = ? ORDER BY partition",
        (name,),
    ).fetchall()
    return {int(p): int(end) for p, end in rows}


def _lasts(conn: sqlite3.Connection, name: str) -> dict[int, int]:
    partitions, _ = _topic(conn, name)
    query = "SELECT MAX(position) FROM messages WHERE topic = ? AND partition = ?"
    lasts = (conn.execute(query, (name, p)).fetchone()[0] for p in range(partitions))
    return {p: -1 if last is None else int(last) for p, last in enumerate(lasts)}


def _position_at(conn: sqlite3.Connection, name: str, partition: int, timestamp_ms: int) -> int:
    _check_partition(conn, name, partition)
    row = conn.execute(
        "SELECT position FROM messages WHERE topic = ? AND partition = ? AND ts_max >= ?"
        " ORDER BY ts_max, position LIMIT 1",
        (name, partition, timestamp_ms),
    ).fetchone()
    if row is not None:
        return int(row[0])
    return _ends(conn, name)[partition]


def _committed(conn: sqlite3.Connection, name: str, group: str) -> dict[int, int]:
    _topic(conn, name)
    rows = conn.execute(
        "SELECT partition, position FROM commits WHERE topic = ? AND grp = ?", (name, group)
    ).fetchall()
    return {int(p): int(pos) for p, pos in rows}


def _backlog(conn: sqlite3.Connection, name: str, group: str) -> dict[int, int]:
    partitions, _ = _topic(conn, name)
    committed = _committed(conn, name, group)
    out = {}
    for p in range(partitions):
        row = conn.execute(
            "SELECT COUNT(*) FROM messages WHERE topic = ? AND partition = ? AND position >= ?",
            (name, p, committed.get(p, 0)),
        ).fetchone()
        out[p] = int(row[0])
    return out


def _data_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA data_version").fetchone()[0])

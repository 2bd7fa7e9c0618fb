"""The ``MetaStore`` in one SQLite file (WAL), for ``httpbus dev`` and the unit tests.

It behaves like ZooKeeper: versions start at 0 and grow by one per update, every write is a
compare-and-set, and ephemeral nodes belong to a session. Several stores, in one process or
many, may open the same file: each write is one ``BEGIN IMMEDIATE`` transaction, so the
compare-and-set holds across them.

Sessions: each store has a row in ``sessions`` with a heartbeat it refreshes every sixth of
its ``session_ttl_s`` (each one extends the store's :class:`~metastore.lease.SessionLease`).
``aclose`` deletes its ephemeral nodes at once; the ephemeral nodes of a session whose
heartbeat is older than its ttl (a crashed process) are deleted by whichever live store
notices first. A store that finds its own session reaped (it stalled longer than
its ttl) opens a new session and re-creates the memberships made with :meth:`join`.

Watches: a local write wakes this store's watches at once; writes of other stores are seen
by polling a change counter every ``poll_interval_s``.

All SQLite work runs on one dedicated thread per store, so the event loop never blocks.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeVar

from core.errors import (
    AlreadyExists,
    HttpbusError,
    InUse,
    Malformed,
    MetaStoreUnavailable,
    NotFound,
    VersionConflict,
)
from core.lifecycle import AsyncResource
from metastore import paths
from metastore._support import (
    WatchHub,
    WatchIterator,
    ancestors,
    check_path,
    parent_of,
    rejoin_refused,
)
from metastore.lease import SessionLease
from metastore.protocol import Check, Create, Delete, Node, Op, Update

T = TypeVar("T")
log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY, parent TEXT NOT NULL, data BLOB NOT NULL,
    version INTEGER NOT NULL, ephemeral_owner TEXT);
CREATE INDEX IF NOT EXISTS nodes_parent ON nodes (parent);
CREATE INDEX IF NOT EXISTS nodes_owner ON nodes (ephemeral_owner)
    WHERE ephemeral_owner IS NOT NULL;
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY, heartbeat REAL NOT NULL, ttl REAL NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO meta VALUES ('changes', 0);
INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, NULL);
"""
_DEAD_OWNERS = """
SELECT id FROM sessions WHERE heartbeat + ttl < :now
UNION SELECT DISTINCT ephemeral_owner FROM nodes
      WHERE ephemeral_owner IS NOT NULL AND ephemeral_owner NOT IN (SELECT id FROM sessions)
"""


def _not_found(path: str) -> NotFound:
    return NotFound(f"{path} does not exist", details={"path": path})


class _Db:
    """The SQLite side: synchronous, used only from the store's own thread."""

    def __init__(self, file: str, busy_timeout_s: float, ttl_s: float) -> None:
        self.conn = sqlite3.connect(file, timeout=busy_timeout_s, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.ttl_s = ttl_s
        self.session = ""
        self.conn.executescript(f"BEGIN IMMEDIATE;{_SCHEMA}COMMIT;")

    def write(self, fn: Callable[[], T], *, bump: bool = True) -> T:
        """Run ``fn`` in one write transaction that also bumps the change counter."""
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            result = fn()
            if bump:
                self.conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'changes'")
            self.conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                self.conn.execute("ROLLBACK")
            raise
        return result

    def row(self, path: str) -> tuple[bytes, int, str | None] | None:
        query = "SELECT data, version, ephemeral_owner FROM nodes WHERE path = ?"
        found: tuple[bytes, int, str | None] | None = self.conn.execute(query, (path,)).fetchone()
        return found

    def children(self, path: str) -> list[tuple[str, bytes]]:
        rows = self.conn.execute("SELECT path, data FROM nodes WHERE parent = ?", (path,))
        return sorted((p.rsplit("/", 1)[1], d) for p, d in rows)

    def counter(self) -> int:
        return int(self.conn.execute("SELECT value FROM meta WHERE key = 'changes'").fetchone()[0])

    # -- the operations, each called inside ``write`` ---------------------------------------

    def create(self, path: str, data: bytes, ephemeral: bool) -> None:
        if self.row(path) is not None:
            raise AlreadyExists(f"{path} already exists", details={"path": path})
        for parent in ancestors(path):
            found = self.row(parent)
            if found is None:
                self._insert(parent, b"", None)
            elif found[2] is not None:
                raise Malformed(f"{path} has an ephemeral parent", details={"path": path})
        if ephemeral and not self._alive(self.session):
            raise MetaStoreUnavailable("the embedded session expired; a new one is opening")
        self._insert(path, data, self.session if ephemeral else None)

    def _insert(self, path: str, data: bytes, owner: str | None) -> None:
        self.conn.execute(
            "INSERT INTO nodes VALUES (?, ?, ?, 0, ?)", (path, parent_of(path), data, owner)
        )

    def check(self, path: str, expected_version: int) -> tuple[bytes, int, str | None]:
        found = self.row(path)
        if found is None:
            raise _not_found(path)
        if expected_version != -1 and found[1] != expected_version:
            raise VersionConflict(
                f"{path} is at version {found[1]}, not {expected_version}",
                details={"path": path, "version": found[1]},
            )
        return found

    def update(self, path: str, data: bytes, expected_version: int) -> int:
        version = self.check(path, expected_version)[1] + 1
        self.conn.execute(
            "UPDATE nodes SET data = ?, version = ? WHERE path = ?", (data, version, path)
        )
        return version

    def delete(self, path: str, expected_version: int, recursive: bool) -> None:
        if path == "/":
            raise Malformed("the root cannot be deleted")
        self.check(path, expected_version)
        if recursive:
            # Every descendant sorts between "path/" and "path0" ("0" follows "/" in ASCII).
            self.conn.execute(
                "DELETE FROM nodes WHERE path > ? AND path < ?", (path + "/", path + "0")
            )
        elif self.conn.execute("SELECT 1 FROM nodes WHERE parent = ?", (path,)).fetchone():
            raise InUse(f"{path} has children", details={"path": path})
        self.conn.execute("DELETE FROM nodes WHERE path = ?", (path,))

    def apply(self, ops: Sequence[Op]) -> None:
        for op in ops:
            match op:
                case Create(path, data):
                    self.create(path, data, False)
                case Update(path, data, version):
                    self.update(path, data, version)
                case Delete(path, version):
                    self.delete(path, version, False)
                case Check(path, version):
                    self.check(path, version)

    def ensure_member(self, path: str, data: bytes) -> None:
        found = self.row(path)
        if found is not None and found[2] is not None and not self._alive(found[2]):
            # Left by a dead session (ours, reaped) that the reaper has not cleared yet.
            self.conn.execute("DELETE FROM nodes WHERE path = ?", (path,))
            found = None
        if found is None:
            self.create(path, data, True)
        elif found[2] == self.session:
            self.update(path, data, -1)
        else:
            raise AlreadyExists(f"member {path} belongs to another session", details={"path": path})

    # -- sessions --------------------------------------------------------------------------

    def _alive(self, session: str) -> bool:
        row = self.conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session,))
        return row.fetchone() is not None

    def open_session(self) -> None:
        self.session = uuid.uuid4().hex
        self.conn.execute(
            "INSERT INTO sessions VALUES (?, ?, ?)", (self.session, time.time(), self.ttl_s)
        )

    def heartbeat(self) -> bool:
        """Refresh this session; if it was reaped, open a new one and return True."""
        beat = "UPDATE sessions SET heartbeat = ? WHERE id = ?"
        if self.conn.execute(beat, (time.time(), self.session)).rowcount == 1:
            return False
        self.open_session()
        return True

    def has_dead_sessions(self) -> bool:
        return self.conn.execute(_DEAD_OWNERS, {"now": time.time()}).fetchone() is not None

    def reap(self) -> None:
        dead = [r[0] for r in self.conn.execute(_DEAD_OWNERS, {"now": time.time()})]
        for owner in dead:
            self.end_session(owner)

    def end_session(self, owner: str) -> None:
        self.conn.execute("DELETE FROM nodes WHERE ephemeral_owner = ?", (owner,))
        self.conn.execute("DELETE FROM sessions WHERE id = ?", (owner,))


class EmbeddedMetaStore(AsyncResource):
    """A :class:`~metastore.protocol.MetaStore` in a SQLite file (see the module doc).

    Example::

        async with EmbeddedMetaStore("/var/lib/httpbus/meta.db") as store:
            await store.create("/projects/p", b"{}")
    """

    def __init__(
        self,
        path: str,
        session_ttl_s: float = 10.0,
        poll_interval_s: float = 0.2,
        *,
        busy_timeout_s: float = 5.0,
    ) -> None:
        self._file = path
        self._ttl_s = session_ttl_s
        self._poll_s = poll_interval_s
        self._busy_timeout_s = busy_timeout_s
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._db: _Db | None = None
        self._hub = WatchHub()
        self.lease = SessionLease(session_ttl_s)
        self._joined: dict[str, bytes] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._seen = -1
        self._closed = False

    @property
    def session_id(self) -> str:
        """The id of this store's current session ("" before start)."""
        return self._db.session if self._db else ""

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the file (creating the schema) and a session."""
        self._executor = concurrent.futures.ThreadPoolExecutor(1, "httpbus-embedded-meta")
        self._db = await self._run(
            lambda: _Db(self._file, self._busy_timeout_s, self._ttl_s), started=False
        )
        sent = self.lease.clock()
        await self._write(self._db.open_session, bump=False)
        self.lease.confirm(sent)
        self._spawn(self._tick())

    async def aclose(self) -> None:
        """End watches and the session; this store's ephemeral nodes are deleted now."""
        if self._closed or self._db is None or self._executor is None:
            self._closed = True
            if self._executor is not None:  # start() failed after making it
                self._executor.shutdown(wait=False)
            return
        await self._hub.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.lease.aclose()
        db = self._db
        with contextlib.suppress(MetaStoreUnavailable):  # a crashed file is reaped by ttl
            await self._write(lambda: db.end_session(db.session))
        await self._run(db.conn.close)
        self._closed = True
        self._executor.shutdown(wait=False)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tick(self) -> None:
        """Heartbeat, reap dead sessions, and wake watches when another store wrote."""
        db = self._db
        assert db is not None
        next_beat = time.monotonic() + self.lease.heartbeat_s
        while True:
            await asyncio.sleep(self._poll_s)
            try:
                if time.monotonic() >= next_beat:
                    next_beat = time.monotonic() + self.lease.heartbeat_s
                    sent = self.lease.clock()
                    if await self._write(db.heartbeat, bump=False):
                        log.warning("embedded session was reaped; re-registering members")
                        self._spawn(self._rejoin())
                    self.lease.confirm(sent)
                if await self._run(db.has_dead_sessions):
                    await self._write(db.reap)
                changes = await self._run(db.counter)
            except MetaStoreUnavailable as exc:
                log.warning("embedded metastore tick failed: %s", exc)
                continue
            if changes != self._seen:
                self._seen = changes
                self._hub.wake_all()

    async def _rejoin(self) -> None:
        for path, data in list(self._joined.items()):
            while not self._closed and path in self._joined:
                try:
                    await self._write(functools.partial(self._live_db.ensure_member, path, data))
                    break
                except MetaStoreUnavailable:
                    await asyncio.sleep(self._poll_s)
                except HttpbusError as exc:
                    rejoin_refused(self.lease, path, exc)
                    break

    # -- the thread bridge -------------------------------------------------------------------

    @property
    def _live_db(self) -> _Db:
        if self._db is None or self._closed:
            raise MetaStoreUnavailable(f"embedded metastore {self._file} is not open")
        return self._db

    async def _run(self, fn: Callable[[], T], *, started: bool = True) -> T:
        if self._executor is None or (started and (self._db is None or self._closed)):
            raise MetaStoreUnavailable(f"embedded metastore {self._file} is not open")
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, fn)
        except sqlite3.Error as exc:
            raise MetaStoreUnavailable(f"embedded metastore {self._file}: {exc}") from exc

    async def _write(self, fn: Callable[[], T], *, bump: bool = True) -> T:
        db = self._live_db
        result = await self._run(functools.partial(db.write, fn, bump=bump))
        if bump:
            self._hub.wake_all()
        return result

    # -- reads and writes --------------------------------------------------------------------

    async def get(self, path: str) -> Node | None:
        """The node at ``path``, or None."""
        check_path(path)
        found = await self._run(lambda: self._live_db.row(path))
        return None if found is None else Node(found[0], found[1])

    async def get_many(self, paths: Sequence[str]) -> list[Node | None]:
        """The nodes at ``paths`` (None where absent), in one call on the store's thread."""
        for path in paths:
            check_path(path)

        def read() -> list[Node | None]:
            db = self._live_db
            return [None if (row := db.row(p)) is None else Node(row[0], row[1]) for p in paths]

        return await self._run(read)

    async def children(self, path: str) -> list[str]:
        """Names of the children of ``path``, sorted; [] if it does not exist."""
        check_path(path)
        return [name for name, _ in await self._run(lambda: self._live_db.children(path))]

    async def children_many(self, paths: Sequence[str]) -> list[list[str]]:
        """:meth:`children` of each of ``paths``, in one call on the store's thread."""
        for path in paths:
            check_path(path)

        def read() -> list[list[str]]:
            db = self._live_db
            return [[name for name, _ in db.children(p)] for p in paths]

        return await self._run(read)

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> Node:
        """Create ``path`` and its missing parents (empty, persistent)."""
        check_path(path)
        await self._write(lambda: self._live_db.create(path, data, ephemeral))
        return Node(data, 0)

    async def update(self, path: str, data: bytes, *, expected_version: int) -> Node:
        """Compare-and-set the data on the node's version."""
        check_path(path)
        return Node(
            data, await self._write(lambda: self._live_db.update(path, data, expected_version))
        )

    async def delete(
        self, path: str, *, expected_version: int = -1, recursive: bool = False
    ) -> None:
        """Delete ``path`` (with its subtree if ``recursive``) in one transaction."""
        check_path(path)
        await self._write(lambda: self._live_db.delete(path, expected_version, recursive))

    async def transaction(self, ops: Sequence[Op]) -> None:
        """Apply all ops in one SQLite transaction; missing parents of creates are made."""
        for op in ops:
            check_path(op.path)
        await self._write(lambda: self._live_db.apply(ops))

    def watch(self, path: str) -> AsyncIterator[Node | None]:
        """The node now, then after each change (level-triggered, see the protocol)."""
        check_path(path)
        return WatchIterator(lambda _wake: lambda: self.get(path), self._hub, self._poll_s)

    def watch_children(self, path: str) -> AsyncIterator[list[str]]:
        """The sorted children now, then after each change of the set."""
        check_path(path)
        return WatchIterator(lambda _wake: lambda: self.children(path), self._hub, self._poll_s)

    # -- membership --------------------------------------------------------------------------

    async def join(self, group: str, member: str, data: bytes) -> None:
        """Create the ephemeral member node, owned by this store's session."""
        path = paths.member(group, member)
        await self._write(lambda: self._live_db.ensure_member(path, data))
        self._joined[path] = data

    async def members(self, group: str) -> dict[str, bytes]:
        """The live members of ``group`` and their data."""
        base = paths.members(group)
        return dict(await self._run(lambda: self._live_db.children(base)))

"""The ``MetaStore`` on a real ZooKeeper ensemble, through kazoo.

kazoo runs its own threads; every call here uses kazoo's ``*_async`` API and bridges the
result back to the event loop with ``call_soon_threadsafe``, so the loop never blocks, and
each wait is bounded by ``request_timeout_s`` (then ``MetaStoreUnavailable``; like any
ZooKeeper client, a write that timed out may still have been applied). kazoo's connection
thread waits on its socket with one system call (:mod:`metastore.zk_handler`): each is a GIL
handoff that a busy loop makes wait.

Paths are relative to ``root``, created at ``start()`` if missing (the prefix is applied
here rather than with kazoo's chroot, so the root can be created by the same client).

Sessions: kazoo reconnects by itself. While the connection is down (SUSPENDED) calls fail
with ``MetaStoreUnavailable`` and the ephemeral nodes survive if the connection comes back
within the session timeout. If the session expires (LOST), ZooKeeper has deleted its
ephemeral nodes; kazoo opens a new session and this store re-creates every membership made
with :meth:`join` (retrying until it succeeds or the store closes) and makes every watch
re-read. Ephemeral nodes made with ``create(ephemeral=True)`` are *not* re-created: their
owner must watch for that itself.

Example::

    async with ZooKeeperMetaStore("127.0.0.1:2181", root="/httpbus") as store:
        await store.join("producers", "p-1", b"{}")
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    SessionExpiredError,
    UnimplementedError,
)
from kazoo.protocol.connection import _CONNECTION_DROP

from core.errors import (
    AlreadyExists,
    HttpbusError,
    Malformed,
    MetaStoreUnavailable,
    NotFound,
)
from core.lifecycle import AsyncResource
from metastore import paths, zk_multiread
from metastore._support import WatchHub, WatchIterator, check_path, rejoin_refused
from metastore.lease import SessionLease
from metastore.protocol import Node, Op
from metastore.turn_batch import TurnBatch, each
from metastore.zk_handler import PollHandler
from metastore.zk_writes import Bridge, Writes, translate

log = logging.getLogger(__name__)

_RETRY_S = 0.5  # pause between retries of watch reads and re-joins while disconnected
MAX_IN_FLIGHT = 64  # requests one store has on the wire at once (_call)
# Heartbeats on the wire at once: a beat answered later than half a session after it left
# extends nothing, and beats leave every sixth of one (metastore/lease.py), so three.
BEATS_IN_FLIGHT = 3
# kazoo's errors that are not the server's answer (the connection's, the client's)
_NOT_ANSWERS = (ConnectionLoss, ConnectionClosedError, SessionExpiredError)


def _node(read: zk_multiread.Read) -> Node | None:
    """A ``getData`` of a ``multiRead``: the node, or None where it is absent."""
    return Node(read[0] or b"", read[1].version) if isinstance(read, tuple) else None


class ZooKeeperMetaStore(AsyncResource):
    """A :class:`~metastore.protocol.MetaStore` on ZooKeeper (see the module doc)."""

    def __init__(
        self,
        hosts: str,
        root: str = "/httpbus",
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        *,
        request_timeout_s: float = 10.0,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self._root = "" if root in ("", "/") else check_path(root)
        self._connect_timeout_s = connect_timeout_s
        self._request_timeout_s = request_timeout_s
        self._client = KazooClient(
            hosts=hosts,
            timeout=session_timeout_s,
            connection_retry={"max_tries": -1, "max_delay": 2.0},
            handler=PollHandler(),
        )
        self._hub = WatchHub()
        # Reads, creates, updates asked in one turn of the loop go as one request (turn_batch).
        self._gets: TurnBatch[str, Node | None] = TurnBatch(self._get_one, self._get_each)
        self._writes = Writes(Bridge(self._client, self._abs, self._call))
        self._slots = asyncio.Semaphore(max_in_flight)  # requests on the wire (_call)
        self._has_multi_read = True  # until the server says it has none (before 3.6)
        self.lease = SessionLease(session_timeout_s)
        self._beat = asyncio.Event()  # set: confirm the session now (a reconnect)
        self._beats = 0  # heartbeats on the wire
        self._dropping = False  # a drop of this connection is queued (_leave_silent_server)
        self._suspended_at: float | None = None  # when the connection was last suspended
        self._answered_at = self.lease.clock()  # when the server last answered anything
        self._joined: dict[str, bytes] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lost = False
        self._closed = False

    @property
    def session_id(self) -> int | None:
        """The id of the current ZooKeeper session (None while disconnected)."""
        client_id = self._client.client_id
        return None if client_id is None else int(client_id[0])

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, open the session and create the root if missing."""
        self._loop = asyncio.get_running_loop()
        self._client.add_listener(self._on_state)
        sent = self.lease.clock()
        try:
            await asyncio.to_thread(self._client.start, self._connect_timeout_s)
        except Exception as exc:  # kazoo's timeout error is not a KazooException
            raise MetaStoreUnavailable(f"cannot connect to zookeeper: {exc}") from exc
        if self._root:
            await self._call(self._root, self._client.ensure_path_async, self._root)
        self.lease.confirm(sent)
        self._spawn(self._heartbeat())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _heartbeat(self) -> None:
        """Confirm the session every ``lease.heartbeat_s`` (and at once on a reconnect): one
        read that extends :attr:`lease` (metastore/lease.py). A beat leaves on that cadence
        whether the last one was answered or not (at most :data:`BEATS_IN_FLIGHT` on the
        wire): waiting for each answer spaced the beats a round trip apart, so at a round
        trip of a sixth of the session the lease lapsed between two answers and every lock
        was fenced (tests/chaos/test_slow_network.py); now it holds up to a third, as long
        as the server answers something (:attr:`_silent_after_s`)."""
        while True:
            await self._beat_wait()
            if self._beats < BEATS_IN_FLIGHT:
                self._beats += 1
                self._spawn(self._beat_once())

    async def _beat_once(self) -> None:
        call = asyncio.ensure_future(
            self._call("/", self._client.exists_async, self._abs("/"), urgent=True)
        )
        try:  # an answered call confirms the lease (_call); it queues behind no burst
            await asyncio.wait({call}, timeout=self._silent_after_s)
            silent_for = self.lease.clock() - self._answered_at
            if not call.done() and silent_for >= self._silent_after_s:
                self._leave_silent_server()
            await call
        except HttpbusError as exc:
            log.debug("zookeeper session not confirmed: %s", exc)
        finally:
            self._beats -= 1
            call.cancel()

    @property
    def _silent_after_s(self) -> float:
        """A heartbeat unanswered this long, and nothing else answered meanwhile: the
        server is as good as gone. A quarter of the session: the first unanswered beat
        left a sixth after the last answered one, whose lease ends at half a session, so
        the store is on another server with a twelfth of the session to spare (0.5 s at
        6 s) and fences nothing. A slow server that answers anything (a burst queued
        ahead of the beat, a long round trip with beats on their cadence) is not silent:
        dropping it would fail every request on the wire."""
        return (self.lease.timeout_s or 30.0) / 4

    def _leave_silent_server(self) -> None:
        """Drop the connection to a server that takes requests and answers none, so kazoo
        connects to another while the session lives. kazoo finds a dead server only by an
        unanswered ping, and sends a ping only after a third of the session with nothing
        to send: a store that keeps sending (heartbeats, status writes) never gets there,
        and a worker connected to a silent peer stayed fenced until its session nearly
        expired. ``_CONNECTION_DROP`` is kazoo's own way to drop (its testing harness);
        once per connection: the drop fails every queued request, and the reconnect
        clears the flag."""
        if self._dropping or self._client.state != KazooState.CONNECTED:
            return
        self._dropping = True
        log.warning(
            "zookeeper answered nothing in %.1fs: leaving that server for another",
            self._silent_after_s,
        )
        self._client._call(_CONNECTION_DROP, self._client.handler.async_result())

    async def _beat_wait(self) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.lease.heartbeat_s):
                await self._beat.wait()
        self._beat.clear()

    async def aclose(self) -> None:
        """End watches and the session; ZooKeeper deletes this session's ephemeral nodes."""
        if self._closed:
            return
        self._closed = True
        await self._hub.close()
        await self._gets.aclose()
        await self._writes.aclose()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.lease.aclose()
        with contextlib.suppress(Exception):  # closing is best effort
            async with asyncio.timeout(self._request_timeout_s + 10):
                await asyncio.to_thread(self._client.stop)
            self._client.close()

    def _on_state(self, state: str) -> None:
        """kazoo's connection listener: runs on a kazoo thread, so it only hands over, with
        when it was told (before kazoo sends its next connect request)."""
        loop, at = self._loop, self.lease.clock()
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing to tell
                loop.call_soon_threadsafe(self._state_changed, state, at)

    def _state_changed(self, state: str, at: float) -> None:
        if self._closed:
            return
        if state == KazooState.LOST:
            self.lease.suspend()  # the session is gone: fence now
            self._lost = True
        elif state == KazooState.SUSPENDED:
            # The lease runs on its own clock: the server cannot expire the session before
            # a confirmed request's send + the timeout, whatever the connection does; a
            # connection remade on another server within it fences nothing
            # (metastore/lease.py).
            self._suspended_at = at
            log.info("zookeeper connection suspended; the lease runs to its end")
        elif state == KazooState.CONNECTED:
            if self._suspended_at is not None and not self._lost:
                # The same session taken back: the server heard it after the suspension,
                # so it cannot expire it before then + the timeout.
                self.lease.confirm(self._suspended_at)
            self._suspended_at = None
            self._dropping = False
            self._answered_at = at  # the handshake was an answer: not silent yet
            self._beat.set()
            if self._lost:  # watches of an expired session are gone: re-read and re-arm
                self._hub.wake_all()
                self._lost = False
                self._spawn(self._rejoin())
            else:  # kazoo fired every watch when the connection went: each reads once
                self._hub.wake_retrying()

    async def _rejoin(self) -> None:
        log.warning("zookeeper session expired; re-registering %d members", len(self._joined))
        for path, data in list(self._joined.items()):
            while not self._closed and path in self._joined:
                try:
                    await self._ensure_member(path, data)
                    break
                except MetaStoreUnavailable:
                    await asyncio.sleep(_RETRY_S)
                except HttpbusError as exc:  # taken by another live session: not ours any more
                    rejoin_refused(self.lease, path, exc)
                    break

    # -- the kazoo bridge --------------------------------------------------------------------

    def _abs(self, path: str) -> str:
        check_path(path)
        if path == "/":
            return self._root or "/"
        return self._root + path

    async def _call(
        self, path: str, fn: Callable[..., Any], *args: Any, urgent: bool = False, **kwargs: Any
    ) -> Any:
        """Run a kazoo ``*_async`` call; its errors come back translated for ``path``.

        At most ``max_in_flight`` calls are on the wire at once; the others wait here, not
        in kazoo's queue, so the ``urgent`` heartbeat (which skips the wait) is answered
        behind a bounded queue: a worker taking 10^3 locks at once put thousands of
        requests ahead of it, the answer came after the lease's half a timeout, and every
        lock was fenced (bench/scale.py). The request timeout counts from the send."""
        if urgent:
            return await self._send(path, fn, *args, **kwargs)
        async with self._slots:
            return await self._send(path, fn, *args, **kwargs)

    async def _send(self, path: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()

        def settle(result: Any) -> None:
            if fut.done():
                return
            try:
                fut.set_result(result.get_nowait())
            except Exception as exc:
                fut.set_exception(exc)

        def done(result: Any) -> None:  # on a kazoo thread
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, result)

        sent = self.lease.clock()
        try:
            fn(*args, **kwargs).rawlink(done)
            async with asyncio.timeout(self._request_timeout_s):
                answer = await fut
            # Any answer confirms the session as a heartbeat would: under a burst of
            # requests a heartbeat queued behind them would come back too late.
            self.lease.confirm(sent)
            self._answered_at = self.lease.clock()
            return answer
        except TimeoutError as exc:
            raise MetaStoreUnavailable(
                f"zookeeper did not answer on {path} in {self._request_timeout_s}s"
            ) from exc
        except KazooException as exc:
            if not isinstance(exc, _NOT_ANSWERS):  # the server answered with an error
                self._answered_at = self.lease.clock()
            raise translate(exc, path) from exc

    # -- reads and writes --------------------------------------------------------------------

    async def get(self, path: str) -> Node | None:
        """The node at ``path``, or None. Reads asked in one turn of the event loop go as
        one ``multiRead`` (:mod:`metastore.turn_batch`)."""
        check_path(path)
        return await self._gets.ask(path)

    async def _get_one(self, path: str) -> Node | None:
        try:
            data, stat = await self._call(path, self._client.get_async, self._abs(path))
        except NotFound:
            return None
        return Node(data or b"", stat.version)

    async def _get_each(self, paths: Sequence[str]) -> list[Node | None | HttpbusError]:
        """Each path's outcome, its own error included (:class:`~.turn_batch.TurnBatch`)."""
        found = await self._multi_read(paths, children=False, each=True)
        if found is None:
            return await each(self._get_one(p) for p in paths)
        return [
            translate(one, path) if isinstance(one, Exception) else _node(one)
            for path, one in zip(paths, found, strict=True)
        ]

    async def get_many(self, paths: Sequence[str]) -> list[Node | None]:
        """The nodes at ``paths`` (None where absent), read in ``multiRead`` requests
        (:mod:`metastore.zk_multiread`), all sent at once; on a server without
        ``multiRead``, one ``getData`` each, sent at once (answered in order)."""
        found = await self._multi_read(paths, children=False)
        if found is None:
            return list(await asyncio.gather(*(self._get_one(p) for p in paths)))
        return [_node(one) for one in found]

    async def children_many(self, paths: Sequence[str]) -> list[list[str]]:
        """:meth:`children` of each of ``paths``, in bulk as :meth:`get_many` reads."""
        found = await self._multi_read(paths, children=True)
        if found is None:
            return list(await asyncio.gather(*(self.children(p) for p in paths)))
        return [sorted(one) if isinstance(one, list) else [] for one in found]

    async def _multi_read(
        self, paths: Sequence[str], *, children: bool, each: bool = False
    ) -> list[zk_multiread.Read] | None:
        """Every read's outcome (errors raised, translated; returned as they are with
        ``each``), in chunks of ``CHUNK`` sent at once; None if the server has no
        ``multiRead`` (remembered)."""
        if not self._has_multi_read:
            return None
        size = zk_multiread.CHUNK
        chunks = [paths[i : i + size] for i in range(0, len(paths), size)]
        try:
            read = await asyncio.gather(*(self._read_chunk(c, children, each) for c in chunks))
        except UnimplementedError:
            log.warning("zookeeper: the server has no multiRead (3.6+); reading one by one")
            self._has_multi_read = False
            return None
        return [one for chunk in read for one in chunk]

    async def _read_chunk(
        self, paths: Sequence[str], children: bool, each: bool
    ) -> list[zk_multiread.Read]:
        absolute = [self._abs(p) for p in paths]
        try:
            found = await self._call(paths[0], zk_multiread.send, self._client, absolute, children)
        except MetaStoreUnavailable as exc:
            if isinstance(exc.__cause__, UnimplementedError):
                raise exc.__cause__ from None
            raise
        if each:
            return list(found)
        for path, one in zip(paths, found, strict=True):
            if isinstance(one, Exception):
                raise translate(one, path)
        return list(found)

    async def children(self, path: str) -> list[str]:
        """Names of the children of ``path``, sorted; [] if it does not exist."""
        try:
            names = await self._call(path, self._client.get_children_async, self._abs(path))
        except NotFound:
            return []
        return sorted(names)

    async def create(self, path: str, data: bytes, *, ephemeral: bool = False) -> Node:
        """Create ``path`` and its missing parents (empty, persistent). Creates asked in one
        turn of the event loop go as one ``multi`` (:mod:`metastore.zk_writes`)."""
        check_path(path)
        return await self._writes.create(path, data, ephemeral)

    async def update(self, path: str, data: bytes, *, expected_version: int) -> Node:
        """Compare-and-set the data on the znode version. Updates asked in one turn of the
        event loop go as one ``multi`` (:mod:`metastore.zk_writes`: a worker's status
        nodes)."""
        check_path(path)
        return await self._writes.update(path, data, expected_version)

    async def delete(
        self, path: str, *, expected_version: int = -1, recursive: bool = False
    ) -> None:
        """Delete ``path``; a recursive delete is one multi-op over the whole subtree, so it is
        atomic but bounded by ZooKeeper's request size (``jute.maxbuffer``, 1 MB by default:
        thousands of nodes)."""
        if check_path(path) == "/":
            raise Malformed("the root cannot be deleted")
        await self._writes.delete(path, expected_version, recursive)

    async def transaction(self, ops: Sequence[Op]) -> None:
        """One ZooKeeper multi; missing parents of ``Create`` ops are added to it, first
        (:meth:`metastore.zk_writes.Writes.transaction`)."""
        await self._writes.transaction(ops)

    # -- watches -----------------------------------------------------------------------------

    def watch(self, path: str) -> AsyncIterator[Node | None]:
        """The node now, then after each change (level-triggered, see the protocol)."""
        check_path(path)
        return WatchIterator(lambda wake: self._data_reader(path, wake), self._hub, _RETRY_S)

    def watch_children(self, path: str) -> AsyncIterator[list[str]]:
        """The sorted children now, then after each change of the set."""
        check_path(path)
        return WatchIterator(lambda wake: self._children_reader(path, wake), self._hub, _RETRY_S)

    def _watcher(self, wake: asyncio.Event) -> Callable[[Any], None]:
        """One kazoo watch function per watch: kazoo keeps a set, so re-arming adds nothing."""
        loop = asyncio.get_running_loop()

        def fire(_event: Any) -> None:  # on a kazoo thread
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(wake.set)

        return fire

    def _data_reader(self, path: str, wake: asyncio.Event) -> Callable[[], Awaitable[Node | None]]:
        fire, full = self._watcher(wake), self._abs(path)

        async def read() -> Node | None:
            while True:
                try:
                    data, stat = await self._call(path, self._client.get_async, full, watch=fire)
                    return Node(data or b"", stat.version)
                except NotFound:
                    if await self._call(path, self._client.exists_async, full, watch=fire) is None:
                        return None  # the exists watch fires when the node is created

        return read

    def _children_reader(
        self, path: str, wake: asyncio.Event
    ) -> Callable[[], Awaitable[list[str]]]:
        fire, full = self._watcher(wake), self._abs(path)

        async def read() -> list[str]:
            while True:
                try:
                    get = self._client.get_children_async
                    return sorted(await self._call(path, get, full, watch=fire))
                except NotFound:
                    if await self._call(path, self._client.exists_async, full, watch=fire) is None:
                        return []

        return read

    # -- membership --------------------------------------------------------------------------

    async def join(self, group: str, member: str, data: bytes) -> None:
        """Create the ephemeral member node; it is re-created after a session expiry."""
        path = paths.member(group, member)
        previous = self._joined.get(path)
        self._joined[path] = data  # before the call: a session lost meanwhile re-creates it
        try:
            await self._ensure_member(path, data)
        except BaseException:
            if previous is None:
                self._joined.pop(path, None)
            else:
                self._joined[path] = previous
            raise

    async def _ensure_member(self, path: str, data: bytes) -> None:
        try:
            await self.create(path, data, ephemeral=True)
            return
        except AlreadyExists:
            pass
        _, stat = await self._call(path, self._client.get_async, self._abs(path))
        if stat.ephemeralOwner != self.session_id:
            raise AlreadyExists(f"member {path} belongs to another session", details={"path": path})
        await self.update(path, data, expected_version=stat.version)

    async def members(self, group: str) -> dict[str, bytes]:
        """The live members of ``group`` and their data."""
        base = paths.members(group)
        names = await self.children(base)
        nodes = await asyncio.gather(*(self.get(f"{base}/{n}") for n in names))
        return {n: node.data for n, node in zip(names, nodes, strict=True) if node is not None}

"""The ZooKeeper store's writes: creates and compare-and-sets batched into ``multi``
requests, transactions that add their missing parents, recursive deletes.

:class:`Writes` works through a :class:`Bridge`, the store's bounded kazoo call
(``ZooKeeperMetaStore._call``: at most so many requests on the wire, each answer a
confirmation of the session's lease) and its path prefix; it holds no connection of its
own. Creates or updates asked in one turn of the event loop go as one ``multi`` of up to
:data:`~metastore.zk_multiread.CHUNK` writes (:mod:`metastore.turn_batch`): a worker taking
a thousand locks sends a few requests, not a thousand. A ``multi`` is all or nothing, so a
chunk with one write refused (a lock another holds) is made again one write at a time,
each with its own outcome.

At most :data:`WRITES_IN_FLIGHT` writes are on the wire at once (a ``multi`` of n counts
n): ZooKeeper answers a session's requests in order, so its heartbeat waits behind every
write it sent before, and those wait for the quorum. At 10^5 units a member sent all of its
thousand lock creates at once (eight ``multi``s, well under the store's 64 requests), a
hundred members so queued 10^5 writes ahead of their heartbeats, the answers came after
the lease (half the session), and every member's locks were fenced together
(bench/scale.py). Bounded, a member's heartbeat waits for one ``multi`` of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from core.errors import (
    AlreadyExists,
    HttpbusError,
    InUse,
    Malformed,
    MetaStoreUnavailable,
    NotFound,
    VersionConflict,
)
from metastore import zk_multiread
from metastore._support import ancestors
from metastore.protocol import Check, Create, Delete, Node, Op, Update
from metastore.turn_batch import TurnBatch, each

_TX_ATTEMPTS = 5  # a concurrent writer can make a recursive delete or parent set-up retry
WRITES_IN_FLIGHT = zk_multiread.CHUNK  # of one store (the module doc): one full multi


def translate(exc: Exception, path: str) -> HttpbusError:
    """The httpbus error for a kazoo error raised while working on ``path``."""
    table: list[tuple[type[Exception], type[HttpbusError], str]] = [
        (NoNodeError, NotFound, "does not exist"),
        (NodeExistsError, AlreadyExists, "already exists"),
        (BadVersionError, VersionConflict, "is not at the expected version"),
        (NotEmptyError, InUse, "has children"),
        (NoChildrenForEphemeralsError, Malformed, "has an ephemeral parent"),
        (BadArgumentsError, Malformed, "was given bad arguments"),
    ]
    for kazoo_type, ours, what in table:
        if isinstance(exc, kazoo_type):
            return ours(f"{path} {what}", details={"path": path})
    return MetaStoreUnavailable(f"zookeeper failed on {path}: {type(exc).__name__} {exc}")


@dataclass(frozen=True)
class Bridge:
    """What the writes need of the store: its kazoo client, its path prefix (``full``)
    and its bounded call (``call(path, fn, *args, **kwargs)``, errors translated)."""

    client: KazooClient
    full: Callable[[str], str]
    call: Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class _Create:
    """One create asked of :meth:`Writes.create`."""

    path: str
    data: bytes
    ephemeral: bool

    def add_to(self, tx: Any, full: str) -> None:
        tx.create(full, self.data, ephemeral=self.ephemeral)

    def written(self, _result: Any) -> Node:
        return Node(self.data, 0)


@dataclass(frozen=True)
class _Update:
    """One compare-and-set asked of :meth:`Writes.update`."""

    path: str
    data: bytes
    version: int

    def add_to(self, tx: Any, full: str) -> None:
        tx.set_data(full, self.data, version=self.version)

    def written(self, stat: Any) -> Node:
        return Node(self.data, stat.version)


_W = TypeVar("_W", _Create, _Update)  # a write batched in a multi (_write_each)


class WriteBudget:
    """At most ``size`` writes on the wire; a request of n writes takes n (more than
    ``size``: all of it, alone). Waiters go in turn as writes are answered."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.out = 0
        self._answered = asyncio.Condition()

    @asynccontextmanager
    async def take(self, writes: int) -> AsyncIterator[None]:
        writes = min(writes, self.size)
        async with self._answered:
            await self._answered.wait_for(lambda: self.out + writes <= self.size)
            self.out += writes
        try:
            yield
        finally:
            async with self._answered:
                self.out -= writes
                self._answered.notify_all()


class Writes:
    """See the module doc."""

    def __init__(self, bridge: Bridge) -> None:
        self._zk = bridge
        self.budget = WriteBudget(WRITES_IN_FLIGHT)
        self._creates: TurnBatch[_Create, Node] = TurnBatch(self._create_one, self._create_each)
        self._updates: TurnBatch[_Update, Node] = TurnBatch(self._update_one, self._update_each)

    async def aclose(self) -> None:
        await self._creates.aclose()
        await self._updates.aclose()

    async def create(self, path: str, data: bytes, ephemeral: bool) -> Node:
        """Create ``path`` and its missing parents (empty, persistent)."""
        return await self._creates.ask(_Create(path, data, ephemeral))

    async def update(self, path: str, data: bytes, version: int) -> Node:
        """Compare-and-set the data of ``path`` on its znode version."""
        return await self._updates.ask(_Update(path, data, version))

    async def _create_one(self, ask: _Create) -> Node:
        create, full = self._zk.client.create_async, self._zk.full(ask.path)
        ephemeral = ask.ephemeral
        async with self.budget.take(1):
            await self._zk.call(
                ask.path, create, full, ask.data, ephemeral=ephemeral, makepath=True
            )
        return Node(ask.data, 0)

    async def _create_each(self, asks: Sequence[_Create]) -> list[Node | HttpbusError]:
        return await self._write_each(asks, self._create_one)

    async def _update_one(self, ask: _Update) -> Node:
        set_data, full = self._zk.client.set_async, self._zk.full(ask.path)
        async with self.budget.take(1):
            stat = await self._zk.call(ask.path, set_data, full, ask.data, version=ask.version)
        return Node(ask.data, stat.version)

    async def _update_each(self, asks: Sequence[_Update]) -> list[Node | HttpbusError]:
        return await self._write_each(asks, self._update_one)

    async def _write_each(
        self, asks: Sequence[_W], one: Callable[[_W], Awaitable[Node]]
    ) -> list[Node | HttpbusError]:
        """Each write's outcome: ``multi`` requests of ``CHUNK`` writes, sent at once. A
        ``multi`` is all or nothing, so one refused (a create whose node exists: a lock
        another holds; a parent missing; an update of a version that moved) writes none of
        its chunk, and that chunk's writes are made one by one (``one``), each with its own
        outcome."""
        size = zk_multiread.CHUNK
        chunks = [asks[i : i + size] for i in range(0, len(asks), size)]
        done = await asyncio.gather(*(self._write_chunk(c, one) for c in chunks))
        return [outcome for chunk in done for outcome in chunk]

    async def _write_chunk(
        self, asks: Sequence[_W], one: Callable[[_W], Awaitable[Node]]
    ) -> list[Node | HttpbusError]:
        tx = self._zk.client.transaction()
        for ask in asks:
            ask.add_to(tx, self._zk.full(ask.path))
        async with self.budget.take(len(asks)):
            results = await self._zk.call(asks[0].path, tx.commit_async)
        if not any(isinstance(r, Exception) for r in results):
            return [ask.written(r) for ask, r in zip(asks, results, strict=True)]
        return await each(one(ask) for ask in asks)

    async def delete(self, path: str, expected_version: int, recursive: bool) -> None:
        """Delete ``path``; a recursive delete is one multi over the whole subtree."""
        if not recursive:
            delete = self._zk.client.delete_async
            async with self.budget.take(1):
                await self._zk.call(path, delete, self._zk.full(path), version=expected_version)
            return
        for attempt in range(_TX_ATTEMPTS):
            below = await self._subtree(path)
            ops: list[Op] = [Delete(p) for p in reversed(below)]
            try:
                await self.transaction([*ops, Delete(path, expected_version)])
                return
            except (InUse, NotFound):  # the subtree changed under us: list it again
                if attempt == _TX_ATTEMPTS - 1:
                    raise

    async def _subtree(self, path: str) -> list[str]:
        """Every descendant of ``path``, parents before children; NotFound if it is absent."""
        found: list[str] = []
        level = [path]
        first = True
        while level:
            listed = await asyncio.gather(
                *(
                    self._zk.call(p, self._zk.client.get_children_async, self._zk.full(p))
                    for p in level
                ),
                return_exceptions=True,
            )
            below: list[str] = []
            for parent, names in zip(level, listed, strict=True):
                if isinstance(names, NotFound) and not first:
                    continue  # deleted meanwhile; the transaction will tell if it matters
                if isinstance(names, BaseException):
                    raise names
                below += [f"{parent.rstrip('/')}/{n}" for n in names]
            found += below
            level, first = below, False
        return found

    async def transaction(self, ops: Sequence[Op]) -> None:
        """One ZooKeeper multi; missing parents of ``Create`` ops are added to it, first.

        The multi is tried first as it is (one round trip when the parents exist, as
        they mostly do); only a ``Create`` refused for a missing parent
        makes it look the parents up (an ``exists`` each) and try again with them."""
        for attempt in range(_TX_ATTEMPTS):
            parents = [] if attempt == 0 else await self._missing_parents(ops)
            tx = self._zk.client.transaction()
            for parent in parents:
                tx.create(self._zk.full(parent), b"")
            for op in ops:
                self._add(tx, op)
            async with self.budget.take(len(parents) + len(ops)):
                results = await self._zk.call("transaction", tx.commit_async)
            failed = [
                (i, r)
                for i, r in enumerate(results)
                if isinstance(r, Exception)
                and not isinstance(r, RolledBackError | RuntimeInconsistency)
            ]
            if not failed:
                return
            index, exc = failed[0]
            if index < len(parents) and isinstance(exc, NodeExistsError):
                continue  # someone created the parent meanwhile
            if (
                index >= len(parents)
                and isinstance(ops[index - len(parents)], Create)
                and isinstance(exc, NoNodeError)
            ):
                continue  # a parent is missing (or was deleted meanwhile): add it
            path = parents[index] if index < len(parents) else ops[index - len(parents)].path
            raise translate(exc, path) from exc
        raise MetaStoreUnavailable("transaction kept racing with concurrent parent creation")

    def _add(self, tx: Any, op: Op) -> None:
        full = self._zk.full
        match op:
            case Create(path, data):
                tx.create(full(path), data)
            case Update(path, data, version):
                tx.set_data(full(path), data, version)
            case Delete(path, version):
                tx.delete(full(path), version)
            case Check(path, version):
                tx.check(full(path), version)

    async def _missing_parents(self, ops: Sequence[Op]) -> list[str]:
        created = {op.path for op in ops if isinstance(op, Create)}
        wanted: list[str] = []
        for op in ops:
            if isinstance(op, Create):
                wanted += [a for a in ancestors(op.path) if a not in created and a not in wanted]
        exists = self._zk.client.exists_async
        stats = await asyncio.gather(*(self._zk.call(p, exists, self._zk.full(p)) for p in wanted))
        return [p for p, stat in zip(wanted, stats, strict=True) if stat is None]

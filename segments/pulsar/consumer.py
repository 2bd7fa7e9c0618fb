"""Reads: a Pulsar Reader per partition topic, kept between calls.

``read(name, p, start)`` reuses the partition's reader when ``start`` is where the previous
call stopped (the position after the last message it returned, or the same start if it
returned nothing), which is how a consumer walks a partition; any other start opens a new
reader there (``start_message_id_inclusive``; position 0 opens at the earliest message).
Messages below ``start`` that the broker still hands out (the rest of a batch) are skipped.

A read takes everything the client has already buffered for the reader in one step (the
blocking ``read_next`` with a zero timeout pops its receive queue without waiting; up to
``max_records``), and only when that is empty waits on one ``read_next_async``, then takes
what was buffered behind it. So a reader with a backlog costs one call per message and one
wake-up of the loop per read, not a future and a loop iteration per message (what
``pulsar.asyncio`` does). The end of the buffer is a ``Timeout`` exception, which costs tens
of microseconds: once per read, never per message.

A read that times out leaves its ``read_next_async`` pending on the cursor and the next call
awaits that same request (and drains nothing before it, so order holds): a message that
arrives in between is never lost. Readers use non-durable subscriptions, so they hold no
data back; at most ``reader_cache_size`` are kept, the least recently used are closed first.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections import OrderedDict
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

import pulsar
import pulsar.asyncio as pulsar_asyncio

from core.errors import HttpbusError
from segments.protocol import Stored

from .errors import PULSAR_ERRORS, from_pulsar, from_result, timed_out
from .producer import Link, decode, native, unpack

Key = tuple[str, int]
T = TypeVar("T")
Received = tuple[Any, Any]
"""What a ``read_next_async`` callback got: (``pulsar.Result``, ``_pulsar.Message``)."""


@dataclass
class _Cursor:
    reader: pulsar_asyncio.Reader
    next_position: int
    pending: asyncio.Future[Received] | None = None


class PartitionReaders:
    """The readers of one store, by (storage topic, partition)."""

    def __init__(self, link: Link) -> None:
        self._link = link
        self._cursors: OrderedDict[Key, _Cursor] = OrderedDict()
        self._locks: dict[Key, asyncio.Lock] = {}

    async def read(
        self, name: str, partition: int, start: int, max_records: int, timeout: float
    ) -> list[Stored]:
        """Messages of the partition at positions >= start, in order (see module doc)."""
        key = (name, partition)
        async with self._locks.setdefault(key, asyncio.Lock()):
            cursor = self._cursors.get(key)
            if cursor is None or cursor.next_position != start:
                if cursor is not None:
                    await self._discard(key)
                reader = await self._open(name, partition, start)
                cursor = self._cursors[key] = _Cursor(reader, start)
                await self._evict_idle()
            self._cursors.move_to_end(key)
            try:
                return await self._fetch(cursor, partition, max_records, timeout)
            except HttpbusError:
                await self._discard(key)
                raise

    async def first_at(self, name: str, partition: int, timestamp_ms: int, end: int) -> int:
        """The first position below ``end`` whose timestamp is >= ``timestamp_ms``, or
        ``end``: a scan from the earliest message (event times need not be ordered, so no
        index can answer; cost grows with what retention keeps)."""
        if end == 0:
            return 0
        reader = await self._open(name, partition, 0)
        try:
            while await self._bounded(reader.has_message_available(), name):
                stored = decode(await self._bounded(reader.read_next(), name), partition)
                if stored.position >= end:
                    break
                if stored.timestamp_ms >= timestamp_ms:
                    return stored.position
            return end
        finally:
            await self._close_reader(reader)

    async def close_topic(self, name: str) -> None:
        """Close the readers of one storage topic (it is being deleted)."""
        for key in [k for k in self._cursors if k[0] == name]:
            await self._discard(key)
        for key in [k for k in self._locks if k[0] == name and not self._locks[k].locked()]:
            del self._locks[key]

    async def aclose(self) -> None:
        for key in list(self._cursors):
            await self._discard(key)

    async def _open(self, name: str, partition: int, start: int) -> pulsar_asyncio.Reader:
        url = self._link.settings.partition_url(name, partition)
        ledger, entry, batch = unpack(start)
        first = (
            pulsar.MessageId.earliest
            if start == 0
            else pulsar.MessageId(-1, ledger, entry, batch if batch > 0 else -1)
        )
        call = self._link.client.create_reader(url, first, start_message_id_inclusive=True)
        task = self._link.inflight.start(call)
        seconds = self._link.settings.produce_timeout_s
        try:
            done, _ = await asyncio.wait({task}, timeout=seconds)
        except asyncio.CancelledError:
            task.add_done_callback(self._close_late)
            raise
        if not done:
            task.add_done_callback(self._close_late)
            raise timed_out(f"opening a reader on {url}", seconds)
        try:
            reader: pulsar_asyncio.Reader = task.result()
        except PULSAR_ERRORS as exc:
            raise from_pulsar(exc, url) from exc
        return reader

    def _close_late(self, task: asyncio.Task[pulsar_asyncio.Reader]) -> None:
        """A reader created after its caller gave up: close it."""
        if not task.cancelled() and task.exception() is None:
            self._link.inflight.start(self._close_reader(task.result()))

    async def _fetch(
        self, cursor: _Cursor, partition: int, max_records: int, timeout: float
    ) -> list[Stored]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        out: list[Stored] = []
        if cursor.pending is None:
            self._drain(cursor, partition, max_records, out)
        while not out:
            if cursor.pending is None:
                cursor.pending = self._read_next(cursor.reader)
            if not cursor.pending.done():
                wait = deadline - loop.time()
                if wait <= 0:
                    break
                await asyncio.wait({cursor.pending}, timeout=wait)
                if not cursor.pending.done():
                    break
            (result, msg), cursor.pending = cursor.pending.result(), None
            if result != pulsar.Result.Ok:
                raise from_result(result, cursor.reader.topic())
            self._keep(cursor, decode(msg, partition), out)
            self._drain(cursor, partition, max_records, out)
        return out

    def _read_next(self, reader: pulsar_asyncio.Reader) -> asyncio.Future[Received]:
        """One ``read_next_async``, completed through the handover."""
        future: asyncio.Future[Received] = asyncio.get_running_loop().create_future()
        native(reader).read_next_async(functools.partial(self._link.handover.call, _settle, future))
        return future

    def _drain(self, cursor: _Cursor, partition: int, max_records: int, out: list[Stored]) -> None:
        """Append what the client has buffered for the reader, without waiting."""
        reader = native(cursor.reader)
        while len(out) < max_records:
            try:
                msg = reader.read_next(0)
            except pulsar.Timeout:
                return
            except PULSAR_ERRORS as exc:
                raise from_pulsar(exc, cursor.reader.topic()) from exc
            self._keep(cursor, decode(msg, partition), out)

    @staticmethod
    def _keep(cursor: _Cursor, stored: Stored, out: list[Stored]) -> None:
        # The broker may hand out the start of a batch below the position asked for.
        if stored.position >= cursor.next_position:
            out.append(stored)
            cursor.next_position = stored.position + 1

    async def _bounded(self, awaitable: Awaitable[T], what: str) -> T:
        seconds = self._link.settings.produce_timeout_s
        try:
            async with asyncio.timeout(seconds):
                return await awaitable
        except TimeoutError as exc:
            raise timed_out(what, seconds) from exc
        except PULSAR_ERRORS as exc:
            raise from_pulsar(exc, what) from exc

    async def _evict_idle(self) -> None:
        while len(self._cursors) > self._link.settings.reader_cache_size:
            idle = next((k for k in self._cursors if not self._locks[k].locked()), None)
            if idle is None:
                return
            await self._discard(idle)

    async def _discard(self, key: Key) -> None:
        cursor = self._cursors.pop(key, None)
        if cursor is None:
            return
        if cursor.pending is not None:
            cursor.pending.cancel()
        await self._close_reader(cursor.reader)

    async def _close_reader(self, reader: pulsar_asyncio.Reader) -> None:
        with contextlib.suppress(TimeoutError, *PULSAR_ERRORS):
            async with asyncio.timeout(self._link.settings.produce_timeout_s):
                await reader.close()


def _settle(future: asyncio.Future[Received], result: Any, msg: Any) -> None:
    # On the loop (through the handover). A discarded cursor cancelled its future already.
    if not future.done():
        future.set_result((result, msg))

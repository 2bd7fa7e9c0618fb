"""Durable produce to partition topics, and the wire format of a record on Pulsar.

**Positions.** A Pulsar message id is (ledger, entry, partition, batch index); within one
partition topic ids grow in produce order, compared as (ledger, entry, batch index). A
position packs them into one int that grows the same way::

    position = ledger << 32 | entry << 12 | batch_index        (63 bits: fits int64)

with the bounds it relies on, checked on every pack (``PositionOverflow`` otherwise):
ledger id < 2**31 (BookKeeper ids are global and grow slowly, one per ledger roll-over);
entry id < 2**20 (the broker rolls a ledger at ``managedLedgerMaxEntriesPerLedger``,
50,000 by default, keep it below 1,048,575); batch index < 2**12 (our producers build
batches of at most ``batching_max_messages`` = 1000). A message that is not in a batch
(batch index -1) packs as batch index 0. The position after the last message of an entry
is ``pack(ledger, entry + 1, 0)``: the next entry of the ledger, or anything in a later
ledger, packs at least as high. Positions are sparse, as the protocol allows.

**Records.** payload -> message payload, byte for byte. ``timestamp_ms`` (or the store's
clock; also for a timestamp <= 0, which Pulsar reads as "no event time") ->
``event_timestamp``, read back as ``Stored.timestamp_ms`` (a message without one, written
by a plain Pulsar producer, reads as its publish time).
key -> ``partition_key`` as the latin-1 decoding of the bytes (reversible for any bytes);
an empty key also sets the property ``httpbus-empty-key``, since Pulsar's API cannot tell
an empty partition key from none. Headers -> one property ``httpbus-headers`` holding a
JSON list of ``[name, base64(value)]``: Pulsar properties are an unordered map of strings,
while headers are ordered, may repeat and carry arbitrary bytes. A message without that
property (written by a plain Pulsar producer) reads its properties back as headers.

The codec itself (packing, properties) is :mod:`core.pulsar_format`, shared with the Spark
reader; this module adds the client calls and turns its ``OutOfRange`` into
``PositionOverflow``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pulsar
import pulsar.asyncio as pulsar_asyncio
from pulsar import _pulsar  # the C extension under both of its Python APIs

from core import pulsar_format as wire
from core.errors import HttpbusError
from segments.protocol import Record, Stored

from .config import PulsarSettings
from .errors import (
    PULSAR_ERRORS,
    PositionOverflow,
    from_pulsar,
    from_result,
    result_of,
    timed_out,
)
from .handover import Handover

T = TypeVar("T")
# After these the cached producer is useless: drop it, the next produce makes a new one.
_STALE = {
    pulsar.Result.AlreadyClosed,
    pulsar.Result.ProducerNotInitialized,
    pulsar.Result.TopicTerminated,
    pulsar.Result.TopicNotFound,
}


def pack(ledger: int, entry: int, batch_index: int) -> int:
    """The position of message id (ledger, entry, batch_index); see the module doc."""
    try:
        return wire.pack(ledger, entry, batch_index)
    except wire.OutOfRange as exc:
        raise PositionOverflow(str(exc)) from None


def unpack(position: int) -> tuple[int, int, int]:
    """(ledger, entry, batch index) of a position."""
    try:
        return wire.unpack(position)
    except wire.OutOfRange as exc:
        raise PositionOverflow(str(exc)) from None


end_after = wire.end_after


def encode(record: Record, timestamp_ms: int) -> dict[str, Any]:
    """Keyword arguments of ``Producer.send`` (except the payload) for ``record``."""
    kwargs: dict[str, Any] = {"properties": wire.properties(record.headers, record.key)}
    if record.key is not None:
        kwargs["partition_key"] = wire.partition_key(record.key)
    if timestamp_ms > 0:
        kwargs["event_timestamp"] = timestamp_ms
    return kwargs


def decode(msg: pulsar.Message, partition: int) -> Stored:
    """The stored record of a message read from partition ``partition``."""
    mid = msg.message_id()
    props: dict[str, str] = msg.properties()
    return Stored(
        partition=partition,
        position=pack(mid.ledger_id(), mid.entry_id(), mid.batch_index()),
        timestamp_ms=msg.event_timestamp() or msg.publish_timestamp(),
        value=msg.data(),
        key=wire.decode_key(msg.partition_key(), props),
        headers=wire.decode_headers(props),
    )


def now_ms() -> int:
    return int(time.time() * 1000)


class Inflight:
    """Client calls that may outlive the caller's wait (a timed-out producer or reader
    creation). pulsar-client aborts the process when a client is closed during a pending
    lookup, so the store drains these, each bounded by the client's operation timeout,
    before it closes the client."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, call: Coroutine[Any, Any, T]) -> asyncio.Task[T]:
        task = asyncio.ensure_future(call)
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # mark it retrieved: a caller still waiting gets it anyway

    async def drain(self, timeout: float) -> None:
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)


@dataclass(frozen=True)
class Link:
    """What the producers and the readers of one store share: its client and settings, the
    client calls still running (:class:`Inflight`) and the hand-over of the client's callbacks
    to the loop (:class:`~.handover.Handover`)."""

    client: pulsar_asyncio.Client
    settings: PulsarSettings
    inflight: Inflight
    handover: Handover


Sent = tuple[int, int, int]
"""The message id of a stored record: (ledger, entry, batch index)."""


def native(handle: Any) -> Any:
    """The ``_pulsar`` object under a ``pulsar.asyncio`` producer or reader. The hot paths
    call its callback API (``send_async``, ``read_next_async``, ``read_next``) themselves,
    to complete many futures per wake-up of the loop (see ``handover``); ``pulsar.asyncio``
    keeps making and closing them. Checked by the unit tests, so a pulsar-client that renames
    the attribute fails there, not in production."""
    for attribute in ("_producer", "_reader"):
        inner = getattr(handle, attribute, None)
        if inner is not None:
            return inner
    raise TypeError(f"{type(handle).__name__} wraps no pulsar-client object")


def build(record: Record, timestamp_ms: int) -> Any:
    """The ``_pulsar.Message`` of ``record``: its payload and what :func:`encode` gives."""
    builder = _pulsar.MessageBuilder()
    builder.content(record.value)
    kwargs = encode(record, timestamp_ms)
    if kwargs["properties"]:
        builder.properties(kwargs["properties"])
    if "partition_key" in kwargs:
        builder.partition_key(kwargs["partition_key"])
    if "event_timestamp" in kwargs:
        builder.event_timestamp(kwargs["event_timestamp"])
    return builder.build()


class _Sends:
    """The outcomes of one ``send_many``: a (result, message id) per record, and one future
    completed when the last is in. Touched on the loop thread only (the client's callbacks
    reach it through the ``Handover``), so it needs no lock."""

    __slots__ = ("future", "left", "outcomes")

    def __init__(self, future: asyncio.Future[None], size: int) -> None:
        self.future = future
        # (None, None) while unreported; a report after the deadline still lands here, but
        # the caller has taken its copy and answered already.
        self.outcomes: list[tuple[Any, Any]] = [(None, None)] * size
        self.left = size

    def report(self, index: int, result: Any, message_id: Any) -> None:
        self.outcomes[index] = (result, message_id)
        self.left -= 1
        if self.left == 0 and not self.future.done():
            self.future.set_result(None)


def _expire(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class PartitionProducers:
    """One producer per partition topic, made on first use and kept until closed.

    A record goes to the client with ``send_async`` and a callback; the callback
    (on the client's thread) only queues its outcome on the ``Handover``, which completes the
    outcomes on the loop, many per wake-up, and one future per ``send_many`` when its last
    record is acknowledged. The broker acknowledges only what it persisted, so every outcome
    that carries a message id is a durable write; an error carries the client's result code.
    ``pulsar.asyncio`` (a future and a ``call_soon_threadsafe`` per message) still creates and
    closes producers, which is rare.
    """

    def __init__(self, link: Link) -> None:
        self._link = link
        self._timeout_s = link.settings.produce_timeout_s
        self._producers: dict[str, pulsar_asyncio.Producer] = {}
        self._creating: dict[str, asyncio.Task[pulsar_asyncio.Producer]] = {}

    async def get(self, topic_url: str) -> pulsar_asyncio.Producer:
        """The producer of a partition topic (``SegmentFenced`` if it is terminated,
        ``NotFound`` if it does not exist, ``StorageUnavailable`` otherwise). Concurrent
        callers share one creation, which goes on (and caches its producer) even if they
        stop waiting."""
        producer = self._producers.get(topic_url)
        if producer is not None:
            return producer
        task = self._creating.get(topic_url)
        if task is None:
            task = self._link.inflight.start(self._create(topic_url))
            self._creating[topic_url] = task
            task.add_done_callback(lambda _: self._creating.pop(topic_url, None))
        return await asyncio.shield(task)

    async def _create(self, topic_url: str) -> pulsar_asyncio.Producer:
        try:
            producer = await self._link.client.create_producer(
                topic_url, **self._link.settings.producer_options()
            )
        except PULSAR_ERRORS as exc:
            raise from_pulsar(exc, topic_url) from exc
        self._producers[topic_url] = producer
        return producer

    async def get_by(self, topic_url: str, deadline: float) -> pulsar_asyncio.Producer:
        """``get``, failing (``StorageUnavailable``) at ``deadline`` (loop time)."""
        producer = self._producers.get(topic_url)
        if producer is not None:
            return producer
        try:
            async with asyncio.timeout_at(deadline):
                return await self.get(topic_url)
        except TimeoutError as exc:
            raise timed_out(f"opening a producer on {topic_url}", self._timeout_s) from exc

    async def send_many(
        self, items: Sequence[tuple[str, pulsar_asyncio.Producer, Record, int]], deadline: float
    ) -> list[Sent | HttpbusError]:
        """Send every (topic url, producer, record, timestamp) and wait for every broker's
        persisted ack, until ``deadline`` (loop time): a message id or an error per item, in
        order. Records of one producer reach the client in the order given, so they are
        stored in that order."""
        outcomes = await self._send_all(items, deadline)
        return [
            self._outcome(url, producer, result, mid)
            for (url, producer, _, _), (result, mid) in zip(items, outcomes, strict=True)
        ]

    async def produce(self, topic_url: str, record: Record, ts: int, deadline: float) -> Sent:
        """Send with the cached producer; once more with a new one if it was closed under
        us (a broker that dropped it, a topic unloaded). Fails at ``deadline``."""
        producer = await self.get_by(topic_url, deadline)
        [(result, mid)] = await self._send_all([(topic_url, producer, record, ts)], deadline)
        if result == pulsar.Result.AlreadyClosed:
            self._forget(topic_url, producer)
            producer = await self.get_by(topic_url, deadline)
            [(result, mid)] = await self._send_all([(topic_url, producer, record, ts)], deadline)
        outcome = self._outcome(topic_url, producer, result, mid)
        if isinstance(outcome, HttpbusError):
            raise outcome
        return outcome

    async def _send_all(
        self, items: Sequence[tuple[str, pulsar_asyncio.Producer, Record, int]], deadline: float
    ) -> list[tuple[Any, Any]]:
        """(result, message id) per item; (None, None) for one not acknowledged by
        ``deadline``. Per record only a message build, ``send_async`` and one queued
        callback; one future and one timer for the whole call (see ``handover``)."""
        loop = self._link.handover.loop
        sends = _Sends(loop.create_future(), len(items))
        call = self._link.handover.call
        for index, (_, producer, record, ts) in enumerate(items):
            try:
                native(producer).send_async(
                    build(record, ts), functools.partial(call, sends.report, index)
                )
            except PULSAR_ERRORS as exc:
                sends.report(index, result_of(exc), None)
        if sends.left:
            # A timer, not asyncio.timeout: no task bookkeeping per request.
            timer = loop.call_at(deadline, _expire, sends.future)
            try:
                await sends.future
            finally:
                timer.cancel()
        return list(sends.outcomes)  # a copy: reports arriving later do not change it

    def _outcome(
        self, url: str, producer: pulsar_asyncio.Producer, result: Any, mid: Any
    ) -> Sent | HttpbusError:
        if result == pulsar.Result.Ok:
            return mid.ledger_id(), mid.entry_id(), mid.batch_index()
        if result is None:
            return timed_out(f"produce to {url}", self._timeout_s)
        if result in _STALE:
            self._forget(url, producer)
        return from_result(result, url)

    def _forget(self, url: str, producer: pulsar_asyncio.Producer) -> None:
        """Drop a cached producer that is useless now; the next produce makes a new one."""
        if self._producers.get(url) is producer:
            del self._producers[url]

    async def close_topics(self, prefix: str) -> None:
        """Close the producers of every partition of one storage topic."""
        urls = [url for url in self._producers if url.startswith(prefix)]
        await asyncio.gather(*(self._close(self._producers.pop(url)) for url in urls))

    async def aclose(self) -> None:
        producers = list(self._producers.values())
        self._producers.clear()
        await asyncio.gather(*(self._close(p) for p in producers))

    async def _close(self, producer: pulsar_asyncio.Producer) -> None:
        # A producer fenced by termination reports AlreadyClosed: nothing left to release.
        with contextlib.suppress(TimeoutError, *PULSAR_ERRORS):
            async with asyncio.timeout(self._link.settings.produce_timeout_s):
                await producer.close()

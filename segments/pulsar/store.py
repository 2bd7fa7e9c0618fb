"""``PulsarSegmentStore``: the ``SegmentStore`` of one Pulsar cluster.

- **Topics**: a storage topic is a partitioned persistent topic created through the admin
  API. Retention is a *topic-level* policy (``retentionTimeInMinutes`` = ``retention_ms``
  rounded up to minutes, no size bound), so messages stay that long even when no
  subscription holds them. Limits: it needs ``topicLevelPoliciesEnabled`` on the broker
  (where it is off, ``create_topic`` fails and removes the topic: set retention on the
  namespace instead); the policy travels through the ``__change_events`` system topic,
  so the first moments of a topic run under the namespace default. Deleting is a force
  delete (subscriptions, and so commits, go with it).
- **Produce** goes to the partition's own topic, never through the client's router; see
  ``producer`` for the record format and the position packing. The whole call (partition
  lookup, producer creation, persisted send) is bounded by ``produce_timeout_s``; a send
  that times out may still be stored later (at-least-once: the caller retries).
- **Seal** terminates every partition topic (admin ``terminate``, idempotent: it answers
  the same last message id again). The broker refuses every later write, from any
  producer of any process, with ``TopicTerminated`` -> ``SegmentFenced``. The end
  positions are computed from the ids the termination returns. ``is_sealed`` reads the
  managed-ledger state (``Terminated``) of every partition from the internal stats.
- **End positions**: the admin ``lastMessageId`` of each partition, plus one entry.
- **position_at** scans from the earliest message: see ``consumer.PartitionReaders``.
- **Commits** live in Pulsar: a durable subscription named ``group`` per partition topic,
  created on first commit. Our position P is exclusive (``group`` finished every message
  below P); Pulsar's cursor has a mark-delete position M (every entry <= M acknowledged)
  and a read position R, the entry after M. ``commit`` resets the cursor so that R is the
  entry of P (``resetcursor`` with ``isExcluded=false``), and ``committed`` reads R back
  from the internal stats. Cursors hold whole entries: a P inside a batch (batch index b
  > 0) is resolved with the entry's batch size (admin get-message-by-id): past the end of
  the batch it becomes the next entry; strictly inside it is rounded *down* to the start
  of the batch, so that part of the batch is delivered again (at-least-once) and
  ``committed`` answers the lower position. A P at the end of a closed ledger reads back
  as the start of the next ledger; P = 0 is "earliest". Both are equivalent positions:
  no message lies between them.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import httpx
import pulsar.asyncio as pulsar_asyncio

from core.errors import AlreadyExists, HttpbusError, NotFound, ValidationFailed
from core.lifecycle import AsyncResource
from segments.config import PulsarClusterConfig
from segments.protocol import Fence, Produced, Record, Stored, partition_for

from .admin import EARLIEST, PulsarAdmin
from .config import PulsarSettings, partition_name
from .consumer import PartitionReaders
from .errors import PULSAR_ERRORS, from_pulsar, timed_out
from .handover import Handover
from .producer import Inflight, Link, PartitionProducers, end_after, now_ms, pack, unpack

_CURSOR = re.compile(r"^(-?\d+):(-?\d+)")


class PulsarSegmentStore(AsyncResource):
    """The storage topics of one Pulsar cluster (tenant and namespace from the config).

    ``http`` (optional) is the ``httpx.AsyncClient`` used for the admin API; by default
    the store makes and closes its own.
    """

    def __init__(self, config: PulsarClusterConfig, *, http: httpx.AsyncClient | None = None):
        self._settings = PulsarSettings.from_config(config)
        self._http = http
        self._admin_client: PulsarAdmin | None = None
        self._pulsar: Any = None
        self._producer_pool: PartitionProducers | None = None
        self._reader_pool: PartitionReaders | None = None
        self._partition_counts: dict[str, int] = {}
        self._round_robin = itertools.count()
        self._inflight = Inflight()

    # -- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        if self._pulsar is not None:
            return
        s = self._settings
        try:
            client = pulsar_asyncio.Client(s.service_url, **s.client_options())
        except PULSAR_ERRORS as exc:
            raise from_pulsar(exc, s.service_url) from exc
        self._pulsar = client
        self._admin_client = PulsarAdmin(
            s.admin_url,
            tenant=s.tenant,
            namespace=s.namespace,
            timeout_s=s.admin_timeout_s,
            token=s.admin_token,
            http=self._http,
        )
        link = Link(client, s, self._inflight, Handover(asyncio.get_running_loop()))
        self._producer_pool = PartitionProducers(link)
        self._reader_pool = PartitionReaders(link)

    async def aclose(self) -> None:
        client, self._pulsar = self._pulsar, None
        if client is None:
            return
        try:
            await self._close_client(client)
        finally:  # whatever the client's close raised: the admin's connections are closed
            if self._admin_client is not None:
                await self._admin_client.aclose()

    async def _close_client(self, client: Any) -> None:
        # Let abandoned creations finish first (see ``Inflight``), then close what they made.
        drain_s = self._settings.client_options()["operation_timeout_seconds"] + 1
        await self._inflight.drain(drain_s)
        if self._reader_pool is not None:
            await self._reader_pool.aclose()
        if self._producer_pool is not None:
            await self._producer_pool.aclose()
        await self._inflight.drain(drain_s)
        # The blocking close, in a thread: the asyncio close completes while the client's
        # threads still run, and a process that exits right then aborts.
        with contextlib.suppress(TimeoutError, *PULSAR_ERRORS):
            blocking_close = client._client.close
            async with asyncio.timeout(self._settings.admin_timeout_s):
                await asyncio.to_thread(blocking_close)

    # -- topics -----------------------------------------------------------------------

    async def create_topic(self, name: str, partitions: int, *, retention_ms: int) -> None:
        if partitions < 1:
            raise ValidationFailed(f"partitions must be >= 1, not {partitions}")
        admin = self._admin
        await admin.create_partitioned_topic(name, partitions)
        minutes = -1 if retention_ms < 0 else math.ceil(retention_ms / 60_000)
        try:
            await admin.set_retention(name, minutes)
        except HttpbusError:
            # A storage topic without its retention would lose data: do not leave it.
            with contextlib.suppress(HttpbusError):
                await admin.delete_partitioned_topic(name)
            raise
        self._partition_counts[name] = partitions

    async def delete_topic(self, name: str) -> None:
        self._partition_counts.pop(name, None)
        await self._readers.close_topic(name)
        await self._producers.close_topics(self._settings.partition_prefix(name))
        await self._admin.delete_partitioned_topic(name)

    async def partitions(self, name: str) -> int | None:
        try:
            count = await self._admin.partition_count(name)
        except NotFound:
            return None
        return count or None  # 0: a non-partitioned topic of that name, not ours

    # -- produce ----------------------------------------------------------------------

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        deadline = self._deadline()
        count = self._partition_counts.get(name)
        if count is None:
            async with self._until(deadline, f"produce to {name}"):
                count = await self._count(name)
        target = self._target(record, count, partition)
        ts = _timestamp(record)
        url = self._settings.partition_url(name, target)
        try:
            ledger, entry, batch = await self._producers.produce(url, record, ts, deadline)
        except NotFound:
            self._partition_counts.pop(name, None)  # deleted by someone else
            raise
        return Produced(target, pack(ledger, entry, batch), ts)

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        deadline = self._deadline()
        out: list[Produced | Exception | None] = [None] * len(records)
        failure: HttpbusError | None = None
        try:
            async with self._until(deadline, f"produce to {name}"):
                count = await self._count(name)
            plan = [(self._target(r, count, None), _timestamp(r)) for r in records]
            producers = await self._producers_for(name, {p for p, _ in plan}, deadline)
            sends: list[tuple[int, tuple[str, Any, Record, int]]] = []
            for i, (record, (p, ts)) in enumerate(zip(records, plan, strict=True)):
                producer = producers[p]
                if isinstance(producer, HttpbusError):
                    out[i] = producer
                else:
                    url = self._settings.partition_url(name, p)
                    sends.append((i, (url, producer, record, ts)))
            results = await self._producers.send_many([item for _, item in sends], deadline)
            for (i, _), result in zip(sends, results, strict=True):
                p, ts = plan[i]
                out[i] = (
                    result if isinstance(result, HttpbusError) else Produced(p, pack(*result), ts)
                )
        except HttpbusError as exc:
            failure = exc
        return [o if o is not None else failure or HttpbusError("not sent") for o in out]

    async def _producers_for(
        self, name: str, partitions: set[int], deadline: float
    ) -> dict[int, Any | HttpbusError]:
        out: dict[int, Any | HttpbusError] = {}
        for p in sorted(partitions):
            try:
                url = self._settings.partition_url(name, p)
                out[p] = await self._producers.get_by(url, deadline)
            except HttpbusError as exc:
                out[p] = exc
        return out

    async def open_producers(self, name: str) -> None:
        """Open (and cache) a producer on every partition now, so the first writes do not
        pay for it (a cutover's PREPARE calls this on the target segment)."""
        async with self._within(f"open producers on {name}"):
            count = await self._count(name)
            deadline = self._deadline()
            for p, outcome in (
                await self._producers_for(name, set(range(count)), deadline)
            ).items():
                if isinstance(outcome, HttpbusError):
                    raise outcome
                del p

    # -- read -------------------------------------------------------------------------

    async def read(
        self,
        name: str,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 1.0,
    ) -> list[Stored]:
        self._check_partition(partition, await self._count(name))
        return await self._readers.read(name, partition, start, max(1, max_records), timeout)

    async def end_positions(self, name: str) -> dict[int, int]:
        count = await self._count(name)
        ids = await asyncio.gather(
            *(self._admin.last_message_id(partition_name(name, p)) for p in range(count))
        )
        return {p: end_after(ledger, entry) for p, (ledger, entry) in enumerate(ids)}

    async def last_positions(self, name: str) -> dict[int, int]:
        count = await self._count(name)
        lasts = await asyncio.gather(*(self._last(partition_name(name, p)) for p in range(count)))
        return dict(enumerate(lasts))

    async def _last(self, partition_topic: str) -> int:
        """The last entry's last message: its batch index is the entry's size less one. An
        entry retention removed (its ledger trimmed; every earlier one is gone too): -1."""
        ledger, entry = await self._admin.last_message_id(partition_topic)
        if entry < 0:
            return -1
        try:
            size = await self._admin.batch_size(partition_topic, ledger, entry)
        except NotFound:
            return -1
        return pack(ledger, entry, max(0, size - 1))

    async def position_at(self, name: str, partition: int, timestamp_ms: int) -> int:
        self._check_partition(partition, await self._count(name))
        ledger, entry = await self._admin.last_message_id(partition_name(name, partition))
        end = end_after(ledger, entry)
        return await self._readers.first_at(name, partition, timestamp_ms, end)

    # -- seal -------------------------------------------------------------------------

    async def seal(self, name: str, *, settle_s: float | None = None) -> dict[int, int]:
        # Terminating a partition returns its last entry atomically: no settle to shorten.
        count = await self._count(name)
        ids = await asyncio.gather(
            *(self._admin.terminate(partition_name(name, p)) for p in range(count))
        )
        # Our own producers of this topic are fenced now: release them.
        await self._producers.close_topics(self._settings.partition_prefix(name))
        return {p: end_after(ledger, entry) for p, (ledger, entry) in enumerate(ids)}

    async def fence(self, name: str) -> Fence:
        return Fence(await self.seal(name), final=True)  # termination is atomic

    async def is_sealed(self, name: str) -> bool:
        stats = await self._admin.partitioned_internal_stats(name)
        return bool(stats) and all(s.get("state") == "Terminated" for s in stats.values())

    # -- commits ----------------------------------------------------------------------

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        count = await self._count(name)
        for p in positions:
            self._check_partition(p, count)
        await asyncio.gather(
            *(self._commit_one(partition_name(name, p), group, pos) for p, pos in positions.items())
        )

    async def committed(self, name: str, group: str) -> dict[int, int]:
        count = await self._count(name)
        stats = await self._admin.partitioned_internal_stats(name)
        out: dict[int, int] = {}
        for p in range(count):
            cursor = stats.get(self._settings.partition_url(name, p), {}).get("cursors", {})
            if group in cursor:
                out[p] = _read_position(str(cursor[group].get("readPosition", "")))
        return out

    async def backlog(
        self, name: str, group: str, committed: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        """The broker's ``msgBacklog`` of ``group``'s cursor per partition; where ``group``
        never committed, the entries the managed ledger holds (a batch counts once there).
        The cursor's stats come with the call, so ``committed`` is not needed here."""
        count = await self._count(name)
        stats, internal = await asyncio.gather(
            self._admin.partitioned_stats(name), self._admin.partitioned_internal_stats(name)
        )
        out: dict[int, int] = {}
        for p in range(count):
            url = self._settings.partition_url(name, p)
            sub = stats.get(url, {}).get("subscriptions", {}).get(group)
            if sub is not None:
                out[p] = int(sub.get("msgBacklog", 0))
            else:
                out[p] = int(internal.get(url, {}).get("numberOfEntries", 0))
        return out

    async def _commit_one(self, topic: str, group: str, position: int) -> None:
        at = await self._cursor_target(topic, position)
        try:
            await self._admin.reset_cursor(topic, group, at)
        except NotFound:
            try:
                await self._admin.create_subscription(topic, group, at)
            except AlreadyExists:  # another process made it meanwhile
                await self._admin.reset_cursor(topic, group, at)

    async def _cursor_target(self, topic: str, position: int) -> tuple[int, int]:
        """The (ledger, entry) the cursor must read next for exclusive ``position``."""
        if position == 0:
            return EARLIEST
        ledger, entry, batch = unpack(position)
        if batch == 0:
            return ledger, entry
        size = await self._admin.batch_size(topic, ledger, entry)
        return (ledger, entry + 1) if batch >= size else (ledger, entry)

    # -- helpers ----------------------------------------------------------------------

    @property
    def _admin(self) -> PulsarAdmin:
        if self._admin_client is None:
            raise HttpbusError("the pulsar segment store is not started")
        return self._admin_client

    @property
    def _producers(self) -> PartitionProducers:
        if self._producer_pool is None:
            raise HttpbusError("the pulsar segment store is not started")
        return self._producer_pool

    @property
    def _readers(self) -> PartitionReaders:
        if self._reader_pool is None:
            raise HttpbusError("the pulsar segment store is not started")
        return self._reader_pool

    async def _count(self, name: str) -> int:
        """The partition count (cached: a storage topic never changes it); ``NotFound``."""
        count = self._partition_counts.get(name)
        if count is None:
            count = await self._admin.partition_count(name)
            if count < 1:
                raise NotFound(f"{name} is not a partitioned storage topic")
            self._partition_counts[name] = count
        return count

    def _target(self, record: Record, count: int, partition: int | None) -> int:
        if partition is None:
            counter = next(self._round_robin) if record.key is None else 0
            return partition_for(record.key, count, counter)
        self._check_partition(partition, count)
        return partition

    @staticmethod
    def _check_partition(partition: int, count: int) -> None:
        if not 0 <= partition < count:
            raise ValidationFailed(f"partition {partition} is not in 0..{count - 1}")

    def _deadline(self) -> float:
        """When a produce starting now must have its answer (loop time)."""
        return asyncio.get_running_loop().time() + self._settings.produce_timeout_s

    @contextlib.asynccontextmanager
    async def _until(self, deadline: float, what: str) -> AsyncIterator[None]:
        """Bound a step of a produce by its ``deadline``: ``StorageUnavailable`` at it."""
        try:
            async with asyncio.timeout_at(deadline):
                yield
        except TimeoutError as exc:
            raise timed_out(what, self._settings.produce_timeout_s) from exc

    @contextlib.asynccontextmanager
    async def _within(self, what: str) -> AsyncIterator[None]:
        """Bound a produce by ``produce_timeout_s``: it fails, it never hangs."""
        seconds = self._settings.produce_timeout_s
        try:
            async with asyncio.timeout(seconds):
                yield
        except TimeoutError as exc:
            raise timed_out(what, seconds) from exc


def _timestamp(record: Record) -> int:
    # Pulsar reads an event time of 0 as "none": such records take the store's clock.
    ts = record.timestamp_ms
    return ts if ts is not None and ts > 0 else now_ms()


def _read_position(text: str) -> int:
    """Our position of a cursor read position ``"ledger:entry ..."``; entry -1 is the
    start of the ledger, i.e. the earliest message."""
    match = _CURSOR.match(text)
    if match is None:
        raise HttpbusError(f"unexpected pulsar cursor position {text!r}")
    ledger, entry = int(match[1]), int(match[2])
    return 0 if entry < 0 or ledger < 0 else pack(ledger, entry, 0)

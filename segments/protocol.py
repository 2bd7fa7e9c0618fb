"""The storage SPI: ``SegmentStore``, met by the kafka, pulsar and embedded backends.

A *storage topic* holds one segment: N partitions, each an ordered log. A *position* is an
int that grows strictly with every message of a partition, in produce order (a Kafka offset;
a packed Pulsar message id; a row id). Positions need not be dense. ``end_positions`` are
exclusive: every message stored so far has ``position < end``.

The contract every backend meets (``tests/contract/segment_store_contract.py``):

- ``produce`` returns only after the storage acknowledged the write durably (Kafka
  ``acks=all`` idempotent, Pulsar persisted send, SQLite committed), else raises
  ``StorageUnavailable`` within the configured timeout; it never hangs.
- messages of one key go to one partition (the same partition for the same key on every
  backend, see :func:`partition_for`), and ``read`` returns a partition in produce order.
- ``seal`` fences the storage topic: once it returns, no write to it can succeed, from this
  store or any other process (``SegmentFenced``), and it returns the end positions, which
  then never change.
- ``fence`` raises the same fence and returns the ends as they are at once (:class:`Fence`):
  final where the fence and the ends are one atomic step (Pulsar's termination, SQLite), else
  provisional until ``seal`` returns the final ones (Kafka, whose seal settles first).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from core.errors import StorageUnavailable
from core.lifecycle import Lifecycle

Headers = tuple[tuple[str, bytes], ...]


@dataclass(frozen=True)
class Record:
    """A message to store: key (the group id, or None), payload and headers."""

    value: bytes
    key: bytes | None = None
    headers: Headers = ()
    timestamp_ms: int | None = None  # None: the store's clock


@dataclass(frozen=True)
class Fence:
    """What :meth:`SegmentStore.fence` found: the ends once the fence was up, and whether they
    are final (else :meth:`SegmentStore.seal` gives the final ones)."""

    ends: dict[int, int]
    final: bool


@dataclass(frozen=True)
class Produced:
    partition: int
    position: int
    timestamp_ms: int


@dataclass(frozen=True)
class Stored:
    """A message read back: where it is, and exactly what was produced."""

    partition: int
    position: int
    timestamp_ms: int
    value: bytes
    key: bytes | None = None
    headers: Headers = field(default=())


def partition_for(key: bytes | None, partitions: int, counter: int = 0) -> int:
    """The partition of a key: CRC32 of the key, the same on every backend. Messages
    without a key are spread round-robin by the caller's ``counter``."""
    if key is None:
        return counter % partitions
    return zlib.crc32(key) % partitions


@runtime_checkable
class SegmentStore(Lifecycle, Protocol):
    """One storage cluster (``kafka-main``, ``pulsar-main``, ``embedded``)."""

    async def create_topic(self, name: str, partitions: int, *, retention_ms: int) -> None:
        """Create the storage topic; ``AlreadyExists`` if it exists."""

    async def delete_topic(self, name: str) -> None:
        """Delete the storage topic and its data; ``NotFound`` if absent."""

    async def partitions(self, name: str) -> int | None:
        """The partition count of the storage topic, or None if it does not exist."""

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        """Store one message durably. ``partition`` None: :func:`partition_for` the key."""

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        """Store many messages; a result per record, in order (an exception where it failed).
        Records of one key keep their order."""

    async def read(
        self,
        name: str,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 1.0,
    ) -> list[Stored]:
        """Messages of ``partition`` at positions >= ``start``, in order; waits up to
        ``timeout`` seconds for the first one, returns [] if none came."""

    async def end_positions(self, name: str) -> dict[int, int]:
        """Per partition, the position after the last stored message (0 if empty)."""

    async def last_positions(self, name: str) -> dict[int, int]:
        """Per partition, the position of the last stored message (-1 if none is stored).
        Positions need not be dense, so a position short of the end does not say a message
        is left; one at or below the last does: a scan reads until it has read this one
        (:func:`segments.scan.read_range`), never taking an empty read for the end."""

    async def seal(self, name: str, *, settle_s: float | None = None) -> dict[int, int]:
        """Fence the storage topic against every later write and return its final end
        positions. Idempotent: sealing a sealed topic returns the same positions.

        ``settle_s`` shortens a store's wait between the fence and reading the ends (Kafka's
        settle), for a caller that knows no writer of the topic is in flight (a cutover whose
        live producers all drained); stores that do not wait ignore it."""

    async def fence(self, name: str) -> Fence:
        """Fence the storage topic as ``seal`` does, without waiting to settle: once it
        returns no write can succeed; its ends are final or provisional (:class:`Fence`).
        A cutover moves the produce pointer on the fence and records the final ends after."""

    async def is_sealed(self, name: str) -> bool: ...

    async def position_at(self, name: str, partition: int, timestamp_ms: int) -> int:
        """The first position whose timestamp is >= ``timestamp_ms``; the end if none."""

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        """Record that ``group`` has finished every message below ``positions[p]``."""

    async def committed(self, name: str, group: str) -> dict[int, int]:
        """What ``group`` committed, per partition (partitions never committed: absent)."""

    async def backlog(
        self, name: str, group: str, committed: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        """Per partition (every one), how many stored messages ``group`` has not committed:
        those at or after its committed position (all retained ones if it never committed).
        A count of messages, not a difference of positions (positions need not be dense).

        ``committed``: what the caller knows ``group`` committed, being its only committer (a
        worker sampling its own lag); a store that would have to ask its brokers for the
        group's positions takes these instead, one call fewer."""


def store_of(stores: Mapping[str, SegmentStore], cluster: str) -> SegmentStore:
    """The started store of ``cluster`` among ``stores``; ``StorageUnavailable`` where this
    process has none for it (its settings do not name the cluster)."""
    store = stores.get(cluster)
    if store is None:
        raise StorageUnavailable(f"storage cluster {cluster!r} is not configured here")
    return store

"""The seams of idempotent publish: what the producer asks (:class:`DedupeStore`) and what a
backend stores (:class:`DedupeTable`, rows of claimed ids).

A publish *claims* its id before the write, *records* the message's place after it, or
*releases* the claim when the write failed::

    found = await store.claim("shop/orders@1732700000000", "order-42", 600_000, now_ms)
    if isinstance(found, Original):
        ...  # answer 200, duplicate, with found.segment / partition / position
    else:
        written = await write(...)
        store.record_soon(found, written.segment_id, written.partition, written.position)

Each id is two rows of a table (:class:`RowKey`): one in the time bucket of its claim and one
in the next bucket, so that any later claim of it within the window meets one of them
(:mod:`metastore.dedupe.claims`). Every write of a row sets a new random ``stamp``, and every
change of a row is a compare-and-set on it: a stamp is never reused, so a row deleted and
written again by someone else is never mistaken for one's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from core.lifecycle import Lifecycle

PRODUCERS = "producers"  # the membership group of producer processes (producer_api.app)


@dataclass(frozen=True, slots=True)
class Original:
    """Where the first publish of an id was stored."""

    message_id: str
    segment: int
    partition: int
    position: int


class RowKey(NamedTuple):
    """One row of an id: ``until_ms`` is when no claim reads it any more (its bucket's start
    plus the window), the time its partition is dropped by."""

    scope: str  # the topic, one incarnation of it (a topic made again starts afresh)
    message_id: str
    bucket_ms: int
    until_ms: int


class Place(NamedTuple):
    segment: int
    partition: int
    position: int


class Entry(NamedTuple):
    """What a row holds: who claimed the id when, and where it was stored once it was."""

    at_ms: int
    owner: str
    stamp: int
    place: Place | None = None


class Swap(NamedTuple):
    """One row's part of an all-or-nothing compare-and-set: the row must have ``expected``
    (a stamp, or None: absent) and becomes ``new`` (None: deleted)."""

    key: RowKey
    expected: int | None
    new: Entry | None


@dataclass(frozen=True, slots=True)
class Claim:
    """This process owns the id's rows, at these stamps, until it records or releases them."""

    message_id: str
    rows: tuple[tuple[RowKey, int], ...]
    at_ms: int


class DedupeStore(Lifecycle, Protocol):
    """The ids a topic accepted within its dedupe window, shared by every producer process."""

    async def claim(
        self, scope: str, message_id: str, window_ms: int, now_ms: int
    ) -> Claim | Original:
        """Claim ``message_id`` for a write, or the place of its original if it was stored
        within ``window_ms``. ``DuplicateInFlight`` if another live producer is still
        storing it after the store's wait."""
        ...

    async def record(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        """Store the message's place in its claim: later claims of its id get it."""
        ...

    def record_soon(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        """:meth:`record` in the background (``aclose`` waits for it)."""
        ...

    async def release(self, claim: Claim) -> None:
        """Give the id up after a failed write, so a retry may store it."""
        ...


class DedupeTable(Lifecycle, Protocol):
    """A backend: the rows of claimed ids, batched. Every method takes many rows in one
    round trip; the rows of concurrent publishes are joined by the caller."""

    async def write(
        self,
        inserts: Sequence[tuple[RowKey, Entry]],
        places: Sequence[tuple[RowKey, int, int, Place]],
    ) -> tuple[dict[RowKey, int], dict[RowKey, int]]:
        """In one statement (one round trip carries the claims and the records of many
        publishes): insert each row of ``inserts`` unless its key exists (``ON CONFLICT DO
        NOTHING``, also against an earlier row of ``inserts``), and set the place and new
        stamp of each row of ``places``, ``(key, stamp, new stamp, place)``, that still has
        that stamp. The keys inserted and the keys placed, with their stamps."""
        ...

    async def read(self, keys: Sequence[RowKey]) -> dict[RowKey, Entry]:
        """The rows of ``keys`` that exist."""
        ...

    async def swap(self, swaps: Sequence[Swap]) -> bool:
        """All of ``swaps`` in one transaction, each a compare-and-set on its row's stamp;
        False (nothing changed) if any row was not as expected."""
        ...

    async def delete(self, rows: Sequence[tuple[RowKey, int]]) -> dict[RowKey, int]:
        """Delete each row ``(key, stamp)`` that still has that stamp; the keys deleted and
        the stamps they had."""
        ...

    async def expire(self, now_ms: int) -> int:
        """Drop whole partitions (never row by row) of rows no claim reads at ``now_ms`` any
        more; how many were dropped."""
        ...

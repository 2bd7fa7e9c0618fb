"""Idempotent publish over a :class:`~metastore.dedupe.protocol.DedupeTable`: the one
algorithm every backend runs (docs/producing.md, "Idempotent publish").

Time is cut into buckets as long as the window ``W``. An id claimed at ``now`` is two rows
inserted in one statement (``ON CONFLICT DO NOTHING``), in its bucket ``B = now // W * W``
and in the next one ``B + W``. A later claim of the id within ``W`` falls in bucket ``B``
or ``B + W``, so one of its two rows is one of these, and its insert skips it: of two
processes racing with one id, **exactly one inserts both rows**, whatever their buckets. A
claim that inserted one of its rows only deletes it again (its stamp says it is its own)
and reads the one that was there. Lookups never read a row after its bucket's next one
began, so rows are dropped a whole partition at a time (:meth:`DedupeTable.expire`), never
one by one by age.

A claim is *pending* until :meth:`Claims.record` stores the message's place in its rows,
or :meth:`Claims.release` deletes them when the write failed. A claim that finds a pending
one waits for it (up to ``wait_s``, then ``DuplicateInFlight``, 503), or takes it over at
once when its owner is no live producer any more (a crashed process: :class:`Members`) or
it is older than ``stale_s`` (a publish never takes that long); a compare-and-set on both
rows, so one taker wins.

The claims, records and releases of concurrent publishes are joined into one statement each
(:class:`~metastore.dedupe.batching.Batcher`); only duplicates and takeovers, the rare
paths, cost statements of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import NamedTuple

from core.errors import DuplicateInFlight, HttpbusError
from core.lifecycle import AsyncResource

from .batching import Batcher
from .liveness import Members
from .protocol import Claim, DedupeTable, Entry, Original, Place, RowKey, Swap

log = logging.getLogger(__name__)
Pair = tuple[RowKey, RowKey]
_CLOCK_MARGIN_MS = 300_000


class _Insert(NamedTuple):
    """A claim's two rows, to insert."""

    pair: Pair
    entry: Entry


class _Record(NamedTuple):
    """A claim's place, to set in its rows with a new stamp."""

    claim: Claim
    new: int
    place: Place


def _logged(claim: Claim, placed: asyncio.Future[tuple[bool, bool]]) -> None:
    """The outcome of a record in the background, logged when it was not stored: the claim
    stays pending (a repeat waits for it, then takes it over) or was taken over."""
    if placed.cancelled():
        return
    exc = placed.exception()
    if exc is not None:
        log.warning("the dedupe record of %s failed: %s", claim, exc)
    elif not all(placed.result()):
        log.warning("the dedupe claim of %s was taken over before it was recorded", claim)


def new_stamp() -> int:
    return random.getrandbits(62)


@dataclass(eq=False)
class Claims(AsyncResource):
    """The :class:`~metastore.dedupe.protocol.DedupeStore` of producer ``member_id`` on
    ``table``; ``members`` tells which owners of pending claims are alive."""

    table: DedupeTable
    members: Members
    member_id: str
    _: KW_ONLY
    wait_s: float = 5.0
    poll_s: float = 0.02
    stale_s: float = 60.0
    expire_every_s: float = 60.0
    _expiry: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.stale_ms = int(self.stale_s * 1000)
        # Claims and records share statements, two in flight, and releases one: fewer than
        # the table's connections (4 by default), so a batch is made when it can go.
        self._writes: Batcher[_Insert | _Record, tuple[bool, bool]] = Batcher(
            self._write, parallel=2
        )
        self._deletes: Batcher[Claim, bool] = Batcher(self._delete, parallel=1)

    async def start(self) -> None:
        await self.table.start()
        self._expiry = asyncio.create_task(self._expire_forever())

    async def aclose(self) -> None:
        await self._writes.drained()  # every record lands
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        await self._writes.aclose()
        await self._deletes.aclose()
        await self.table.aclose()

    # ------------------------------------------------------------ the store
    async def claim(
        self, scope: str, message_id: str, window_ms: int, now_ms: int
    ) -> Claim | Original:
        start = now_ms // window_ms * window_ms
        pair = (
            RowKey(scope, message_id, start, start + window_ms),
            RowKey(scope, message_id, start + window_ms, start + 2 * window_ms),
        )
        deadline = time.monotonic() + self.wait_s
        while True:
            mine = Entry(now_ms, self.member_id, new_stamp())
            inserted = await self._writes.submit(_Insert(pair, mine))
            if all(inserted):
                return Claim(message_id, tuple((key, mine.stamp) for key in pair), now_ms)
            if any(inserted):  # one of ours beside another claim's row: not ours to keep
                await self.table.swap(
                    [Swap(k, mine.stamp, None) for k, ok in zip(pair, inserted, strict=True) if ok]
                )
            found = await self._settled(pair, window_ms, now_ms, deadline)
            if found is not None:
                return found

    async def _settled(
        self, pair: Pair, window_ms: int, now_ms: int, deadline: float
    ) -> Claim | Original | None:
        """The outcome of a claim that met another: its original, or the claim taken over;
        None when the other claim was released meanwhile (claim again)."""
        while True:
            rows = await self.table.read(pair)
            entry = rows.get(pair[0]) or rows.get(pair[1])
            if entry is None:
                return None
            expired = entry.at_ms < now_ms - window_ms
            if not expired and entry.place is not None:
                return Original(pair[0].message_id, *entry.place)
            stale = entry.at_ms < now_ms - self.stale_ms  # a publish never takes this long
            if expired or stale or not await self._alive(entry):
                taken = await self._take_over(pair, rows, now_ms)
                if taken is not None:
                    return taken
                continue  # another process took it first: look again
            if time.monotonic() >= deadline:
                raise DuplicateInFlight(
                    f"message {pair[0].message_id} is being stored by another request; retry",
                    retry_after=1,
                )
            await asyncio.sleep(self.poll_s)

    async def _alive(self, entry: Entry) -> bool:
        return entry.owner == self.member_id or await self.members.alive(entry.owner, entry.at_ms)

    async def _take_over(self, pair: Pair, rows: dict[RowKey, Entry], now_ms: int) -> Claim | None:
        """Replace an expired or orphaned claim with ours: one compare-and-set on both rows,
        so of two takers one wins; None if we lost."""
        mine = Entry(now_ms, self.member_id, new_stamp())
        swaps = [Swap(k, rows[k].stamp if k in rows else None, mine) for k in pair]
        if not await self.table.swap(swaps):
            return None
        return Claim(pair[0].message_id, tuple((k, mine.stamp) for k in pair), now_ms)

    async def record(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        """Store the message's place in its claim. A claim taken over meanwhile (this process
        was thought dead) is logged: the message may then be stored twice."""
        placed = await self._writes.submit(
            _Record(claim, new_stamp(), Place(segment, partition, position))
        )
        if not all(placed):
            log.warning("the dedupe claim of %s was taken over before it was recorded", claim)

    def record_soon(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        """:meth:`record` in the background: the answer to the client does not wait for the
        second round trip. Until it lands, a publish of the same id waits for it as for any
        claim in flight; :meth:`aclose` waits for every one."""
        place = Place(segment, partition, position)
        self._writes.submit_soon(_Record(claim, new_stamp(), place)).add_done_callback(
            functools.partial(_logged, claim)
        )

    async def release(self, claim: Claim) -> None:
        with contextlib.suppress(HttpbusError):
            await self._deletes.submit(claim)

    # ------------------------------------------------------------ batched statements
    async def _write(self, items: Sequence[_Insert | _Record]) -> list[tuple[bool, bool]]:
        inserts = [(k, i.entry) for i in items if isinstance(i, _Insert) for k in i.pair]
        places = [
            (key, stamp, i.new, i.place)
            for i in items
            if isinstance(i, _Record)
            for key, stamp in i.claim.rows
        ]
        inserted, placed = await self.table.write(inserts, places)
        return [
            (inserted.get(i.pair[0]) == i.entry.stamp, inserted.get(i.pair[1]) == i.entry.stamp)
            if isinstance(i, _Insert)
            else (all(placed.get(key) == i.new for key, _ in i.claim.rows),) * 2
            for i in items
        ]

    async def _delete(self, claims: Sequence[Claim]) -> list[bool]:
        deleted = await self.table.delete([row for claim in claims for row in claim.rows])
        return [all(deleted.get(key) == stamp for key, stamp in claim.rows) for claim in claims]

    async def _expire_forever(self) -> None:
        while True:
            try:
                # A margin for the clocks of other producers, which may be behind ours.
                await self.table.expire(time.time_ns() // 1_000_000 - _CLOCK_MARGIN_MS)
            except HttpbusError as exc:  # the next round tries again
                log.warning("dedupe expiry failed: %s", exc)
            await asyncio.sleep(self.expire_every_s)

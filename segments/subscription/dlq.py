"""The dead-letter queue of a subscription: its storage topic is its own index.

The DLQ topic (one partition, see :mod:`.layout`) holds two kinds of records, in order:

- *entries*: a dead-lettered message (payload, key, stored headers) with its
  :class:`~.retry_meta.RetryMeta` (attempts, first and last failure, last status or error);
- *removals* (header ``x-httpbus-kind: removed``): a JSON list of entry positions that a purge
  or an unsideline took out.

An entry is *live* when no removal names it. Any process that can read the storage — every
worker, the control plane — rebuilds the same view by reading the topic from the start
(:func:`scan`); a page cursor is an entry position. Nothing is shared on one machine only.
The cost is a read of the topic per browse, fine for DLQs of up to a few hundred thousand
entries (a DLQ that large is an incident, not a queue).

Unsidelining appends the chosen entries, oldest first, to the subscription's replay topic
(with their attempts reset) and only then the removal: a crash between the two replays an
entry twice, never loses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from core.envelope import DLQ_KIND as KIND
from core.envelope import GROUP_ID, MESSAGE_ID, header, own_headers
from core.envelope import REPLAY as REPLAY_HEADER
from core.errors import StorageUnavailable

from ..protocol import Record, SegmentStore, Stored
from ..scan import read_all as read_to_end
from .layout import Layout
from .retry_meta import RetryMeta

REMOVED = b"removed"
# What a record of the replay topic is (header ``x-httpbus-kind``), so the worker audits it as
# what it is and runs a resend through the subscription's filter (docs/operations.md).
REPLAY = b"replay"  # unsidelined from the DLQ
RECOVER = b"recover"  # recovered from the DLQ: its last failure lies in a window
RESEND = b"resend"  # a message of the topic, resent to this one subscription
WINDOW = b"window"  # a message of a window replayed to this one subscription (archive, storage)
_READ_TIMEOUT_S = 0.5


def is_removal(msg: Stored) -> bool:
    return any(k == KIND and v == REMOVED for k, v in msg.headers)


def sidelined(msg: Stored) -> bool:
    """An entry that was never attempted: it followed its group's failed head into the DLQ
    (the admission sidelines a group's later messages behind its dead-lettered head). The
    other entries are *failed heads*: attempted, and failed for good."""
    return RetryMeta.of(msg.headers).attempts == 0 and header(msg.headers, GROUP_ID) is not None


def removed_positions(msg: Stored) -> list[int]:
    try:
        return [int(p) for p in json.loads(msg.value)]
    except (ValueError, TypeError):
        return []


@dataclass
class DlqView:
    """The live entries of a DLQ (by position, in order) as of ``end``."""

    entries: dict[int, Stored] = field(default_factory=dict)
    end: int = 0

    def live(self) -> list[Stored]:
        return list(self.entries.values())


async def read_all(
    store: SegmentStore, name: str, start: int = 0, end: int | None = None
) -> list[Stored]:
    """Every record of partition 0 of ``name`` from ``start`` up to its current end (an
    empty read is not taken for the end: :func:`segments.scan.read_range`)."""
    if end is None:
        end = (await store.end_positions(name)).get(0, 0)
    return await read_to_end(store, name, 0, start, end, timeout=_READ_TIMEOUT_S)


async def scan(store: SegmentStore, layout: Layout) -> DlqView:
    """The live entries of the DLQ now."""
    end = (await store.end_positions(layout.dlq)).get(0, 0)
    view = DlqView(end=end)
    removed: set[int] = set()
    for msg in await read_all(store, layout.dlq, 0, end):
        if is_removal(msg):
            removed.update(removed_positions(msg))
        else:
            view.entries[msg.position] = msg
    for position in removed:
        view.entries.pop(position, None)
    return view


@dataclass(frozen=True)
class Selector:
    """Which live entries an operation takes: exactly one of ids, groups, a time, all. A
    time is an end (``failed_before_ms``), with a start (``failed_after_ms``, inclusive) for a
    recovery's window."""

    message_ids: frozenset[str] | None = None
    group_ids: frozenset[str] | None = None
    failed_before_ms: int | None = None
    everything: bool = False
    failed_after_ms: int | None = None

    def matches(self) -> Callable[[Stored], bool]:
        if self.message_ids is not None:
            ids = self.message_ids
            return lambda m: header(m.headers, MESSAGE_ID) in ids
        if self.group_ids is not None:
            groups = self.group_ids
            return lambda m: header(m.headers, GROUP_ID) in groups
        if self.failed_before_ms is not None:
            before, after = self.failed_before_ms, self.failed_after_ms or 0
            return lambda m: after <= (RetryMeta.of(m.headers).last_failed_ms or 0) < before
        return lambda m: self.everything


def select(view: DlqView, selector: Selector) -> list[Stored]:
    """The matching live entries, oldest first (replay order)."""
    match = selector.matches()
    return [m for m in view.live() if match(m)]


async def remove(store: SegmentStore, layout: Layout, positions: Iterable[int]) -> None:
    """Append a removal of ``positions`` (purge; the last step of an unsideline)."""
    chosen = sorted(positions)
    if chosen:
        record = Record(value=json.dumps(chosen).encode(), headers=((KIND, REMOVED),))
        await store.produce(layout.dlq, record, partition=0)


async def replay(
    store: SegmentStore, layout: Layout, entries: list[Stored], kind: bytes = REPLAY
) -> None:
    """Append ``entries`` (oldest first) to the replay topic with their attempts reset, then
    remove them from the DLQ; ``kind`` says why (an unsideline, a recovery)."""
    if not entries:
        return
    records = []
    for msg in entries:
        meta = RetryMeta.of(msg.headers)
        fresh = RetryMeta(origin=meta.origin, topic=meta.topic)
        headers = own_headers(msg.headers) + fresh.headers() + ((KIND, kind),)
        records.append(Record(value=msg.value, key=msg.key, headers=headers))
    for result in await store.produce_many(layout.replay, records):
        if isinstance(result, Exception):
            raise StorageUnavailable(f"could not replay into {layout.replay}: {result}")
    await remove(store, layout, (m.position for m in entries))


async def resend(store: SegmentStore, layout: Layout, msg: Stored, origin: str, topic: str) -> int:
    """Append ``msg``, read from its segment at ``origin`` (``segment:partition:position``) of
    ``topic``, to the replay topic as a resend (attempts at zero): its replay position."""
    meta = RetryMeta(origin=origin, topic=topic)
    headers = own_headers(msg.headers) + meta.headers() + ((KIND, RESEND),)
    record = Record(value=msg.value, key=msg.key, headers=headers)
    return (await store.produce(layout.replay, record, partition=0)).position


async def replay_window(
    store: SegmentStore, layout: Layout, messages: list[tuple[Stored, str]], topic: str
) -> None:
    """Append ``messages`` (each with its origin ``segment:partition:position``), in order,
    to the replay topic as a window replay: attempts at zero, marked ``x-replay: true``."""
    records = []
    for msg, origin in messages:
        meta = RetryMeta(origin=origin, topic=topic)
        own = tuple((k, v) for k, v in own_headers(msg.headers) if k != REPLAY_HEADER)
        headers = own + ((REPLAY_HEADER, b"true"),) + meta.headers() + ((KIND, WINDOW),)
        records.append(Record(value=msg.value, key=msg.key, headers=headers))
    for result in await store.produce_many(layout.replay, records):
        if isinstance(result, Exception):
            raise StorageUnavailable(f"could not replay into {layout.replay}: {result}")


def replay_kind(msg: Stored) -> bytes:
    """Why a record of the replay topic is there: :data:`REPLAY`, :data:`RECOVER` or
    :data:`RESEND` (a record written before the kinds existed is a replay)."""
    return next((v for k, v in msg.headers if k == KIND), REPLAY)

"""A subscription's dead-letter queue: read back, select, replay (unsideline) or remove
(purge).

The DLQ topic is read back and filtered here (see :mod:`segments.subscription.dlq`), so any
control plane answers the same as any other, whichever worker wrote the entries. Unsidelined
entries are appended to the subscription's replay topic (attempts reset), then removed from
the DLQ; the worker delivers them through the normal path, in order, and lifts the group's
sideline once the group has no entry left. A *recovery* is an unsideline of the entries whose
last failure lies in a window (``since`` to ``until``), audited as ``recovered``. One
unsideline, recovery or purge runs at a time per subscription in this process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from control_plane.services.admin import Admin
from core.envelope import GROUP_ID, header
from core.errors import StorageUnavailable, ValidationFailed
from core.model import Subscription
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore, Stored
from segments.subscription import dlq
from segments.subscription.layout import Layout, load_layout
from segments.subscription.retry_meta import RetryMeta

_locks: dict[str, asyncio.Lock] = {}  # one unsideline or purge at a time per subscription


@dataclass(frozen=True)
class Filter:
    """Which live entries a browse shows: newest or oldest first, from after ``after``
    (a position, in that order), of a group, a last status, a window of last failure, the
    failed heads or the sidelined followers."""

    newest_first: bool = True
    after: int | None = None
    group: str | None = None
    status: int | None = None
    failed_after_ms: int | None = None
    failed_before_ms: int | None = None
    sidelined: bool | None = None  # True: only sidelined followers; False: only failed heads

    def keeps(self, msg: Stored) -> bool:
        if self.after is not None and (
            msg.position >= self.after if self.newest_first else msg.position <= self.after
        ):
            return False
        meta = RetryMeta.of(msg.headers)
        failed = meta.last_failed_ms or 0
        return (
            (self.group is None or header(msg.headers, GROUP_ID) == self.group)
            and (self.status is None or meta.last_status == self.status)
            and (self.failed_after_ms is None or failed > self.failed_after_ms)
            and (self.failed_before_ms is None or failed < self.failed_before_ms)
            and (self.sidelined is None or sidelined(msg) == self.sidelined)
        )


async def browse(admin: Admin, project: str, subscription: str, by: Filter) -> list[Stored]:
    """The live entries ``by`` keeps, in its order."""
    found = await _open(admin, project, subscription)
    if found is None:
        return []
    entries = (await dlq.scan(*found)).live()
    if by.newest_first:
        entries.reverse()
    return [e for e in entries if by.keeps(e)]


def selector(
    ids: frozenset[str] | None,
    groups: frozenset[str] | None,
    failed_before: datetime | None,
    *,
    everything: bool,
) -> dlq.Selector:
    """What an unsideline or a purge acts on: exactly one of ``ids``, ``groups``,
    ``failed_before`` and ``everything`` (a 422 naming the fields otherwise)."""
    given = [
        name
        for name, value in (
            ("message_ids", ids),
            ("group_ids", groups),
            ("failed_before", failed_before),
            ("all", everything or None),
        )
        if value is not None
    ]
    if len(given) != 1:
        raise ValidationFailed(
            "give exactly one selector: message ids, group ids, failed_before"
            + (" or all=true" if "all" in given or not given else "")
            + (f" (got {', '.join(given)})" if given else ""),
            details={"fields": [{"field": name, "problem": "one selector only"} for name in given]},
        )
    before = epoch_ms(failed_before, "failed_before") if failed_before is not None else None
    return dlq.Selector(ids, groups, before, everything)


def epoch_ms(when: datetime, field: str) -> int:
    """``when`` in epoch milliseconds; a 422 naming ``field`` if it has no time zone or
    lies in the future."""
    if when.tzinfo is None:
        raise ValidationFailed(
            f"{field}: give a time zone (2026-01-02T03:04:05Z)",
            details={"fields": [{"field": field, "problem": "no time zone"}]},
        )
    if when > datetime.now(UTC):
        raise ValidationFailed(
            f"{field}: {when.isoformat()} is in the future; nothing failed then yet",
            details={"fields": [{"field": field, "problem": "in the future"}]},
        )
    return int(when.timestamp() * 1000)


async def unsideline(
    admin: Admin, project: str, subscription: str, chosen: dlq.Selector, limit: int
) -> tuple[int, int]:
    """Replay the selected entries (oldest first, at most ``limit``) through the normal
    path with their attempts reset: how many, and how many more match."""
    return await _act(admin, project, subscription, chosen, limit, dlq.replay)


def window(since: datetime, until: datetime) -> tuple[int, int]:
    """A recovery's window in epoch milliseconds, ``since`` inclusive, ``until`` exclusive:
    a 422 naming the field if a time has no zone, ``since`` lies in the future, or the
    window is empty."""
    since_ms = epoch_ms(since, "since")
    if until.tzinfo is None:
        epoch_ms(until, "until")  # raises: no time zone
    until_ms = int(until.timestamp() * 1000)
    if until_ms <= since_ms:
        raise ValidationFailed(
            f"until ({until.isoformat()}) must come after since ({since.isoformat()})",
            details={"fields": [{"field": "until", "problem": "not after since"}]},
        )
    return since_ms, until_ms


async def recover(
    admin: Admin, project: str, subscription: str, since_ms: int, until_ms: int, limit: int
) -> tuple[int, int]:
    """Replay, like an unsideline, the entries whose last failure lies in ``[since_ms,
    until_ms)`` (oldest first, at most ``limit``), marked as recovered: how many, and how
    many more match."""
    chosen = dlq.Selector(failed_before_ms=until_ms, failed_after_ms=since_ms)
    return await _act(admin, project, subscription, chosen, limit, _recovery)


async def _recovery(store: SegmentStore, layout: Layout, entries: list[Stored]) -> None:
    await dlq.replay(store, layout, entries, dlq.RECOVER)


async def purge(
    admin: Admin, project: str, subscription: str, chosen: dlq.Selector, limit: int
) -> tuple[int, int]:
    """Delete the selected entries (oldest first, at most ``limit``) for good: how many,
    and how many more match."""

    async def remove(store: SegmentStore, layout: Layout, entries: list[Stored]) -> None:
        await dlq.remove(store, layout, (m.position for m in entries))

    return await _act(admin, project, subscription, chosen, limit, remove)


async def _act(
    admin: Admin,
    project: str,
    subscription: str,
    chosen: dlq.Selector,
    limit: int,
    act: Callable[[SegmentStore, Layout, list[Stored]], Awaitable[None]],
) -> tuple[int, int]:
    found = await _open(admin, project, subscription)
    if found is None:
        return 0, 0
    async with _locks.setdefault(f"{project}/{subscription}", asyncio.Lock()):
        matching = dlq.select(await dlq.scan(*found), chosen)
        await act(*found, matching[:limit])
    done = min(limit, len(matching))
    return done, len(matching) - done


async def _open(
    admin: Admin, project: str, subscription: str
) -> tuple[SegmentStore, Layout] | None:
    sub = await admin.catalog.get_subscription(project, subscription)
    return await open_dlq(admin.catalog.store, admin.stores, sub)


async def open_dlq(
    meta: MetaStore, stores: Mapping[str, SegmentStore], sub: Subscription
) -> tuple[SegmentStore, Layout] | None:
    """The store and layout of ``sub``'s DLQ; None when nothing was ever dead-lettered or
    delayed (no internal topics yet)."""
    layout = await load_layout(meta, sub)
    if layout is None:  # nothing was ever dead-lettered or delayed
        return None
    store = stores.get(layout.cluster)
    if store is None:
        raise StorageUnavailable(f"the DLQ's storage cluster {layout.cluster!r} is not here")
    return store, layout


def sidelined(msg: Stored) -> bool:
    """An entry that was never attempted (see :func:`segments.subscription.dlq.sidelined`,
    which the worker's count uses too)."""
    return dlq.sidelined(msg)


@dataclass(frozen=True)
class ErrorGroup:
    """The DLQ's entries that failed alike: the failed heads by last status and error, the
    sidelined followers as one group (``sidelined``)."""

    sidelined: bool
    status: int | None
    error: str | None
    count: int
    newest_ms: int | None


@dataclass(frozen=True)
class DlqSummary:
    """What a DLQ holds: ``size`` live entries, of which ``failed_heads`` were attempted and
    failed and ``sidelined`` waited behind their group's failed head, never attempted."""

    size: int
    failed_heads: int
    sidelined: int
    groups: tuple[ErrorGroup, ...]

    def as_dict(self) -> dict[str, object]:
        return {
            "size": self.size,
            "failed_heads": self.failed_heads,
            "sidelined": self.sidelined,
            "by_error": [g.__dict__ for g in self.groups],
        }


def summarize(entries: list[Stored]) -> DlqSummary:
    """Count ``entries`` and group them by error, failed heads first (largest group first),
    the sidelined followers last."""
    counts: dict[tuple[bool, int | None, str | None], list[int]] = {}
    for msg in entries:
        meta = RetryMeta.of(msg.headers)
        behind = sidelined(msg)
        key = (behind, None, None) if behind else (False, meta.last_status, meta.last_error)
        seen = counts.setdefault(key, [0, 0])
        seen[0] += 1
        seen[1] = max(seen[1], meta.last_failed_ms or 0)
    groups = sorted(
        (ErrorGroup(k[0], k[1], k[2], v[0], v[1] or None) for k, v in counts.items()),
        key=lambda g: (g.sidelined, -g.count),
    )
    followers = sum(g.count for g in groups if g.sidelined)
    return DlqSummary(len(entries), len(entries) - followers, followers, tuple(groups))


async def summary(
    meta: MetaStore, stores: Mapping[str, SegmentStore], sub: Subscription
) -> DlqSummary:
    """The summary of ``sub``'s DLQ as stored now, read back whole: the DLQ page's summary by
    error, and a status when no worker counts the DLQ (the workers' count,
    ``delivery_workers.dlq_count``, follows the same topic without a scan per request)."""
    found = await open_dlq(meta, stores, sub)
    if found is None:
        return DlqSummary(0, 0, 0, ())
    return summarize((await dlq.scan(*found)).live())

"""``/v1/projects/{project}/subscriptions/{subscription}/dlq/messages``: browse, unsideline,
purge a subscription's dead-letter queue.

The DLQ topic is read back and filtered here (see :mod:`segments.subscription.dlq`), so any
control plane answers the same as any other, whichever worker wrote the entries. A page
cursor is the storage position of the last entry of the page. Unsidelined entries are
appended to the subscription's replay topic (attempts reset), then removed from the DLQ; the
worker delivers them through the normal path, in order, and lifts the group's sideline once
the group has no entry left.
"""

from __future__ import annotations

import asyncio
import base64
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import AdminDep, ProjectName, SubscriptionName
from control_plane.services.admin import Admin
from core.envelope import CONTENT_TYPE, GROUP_ID, MESSAGE_ID, decode, header, own_headers
from core.errors import Malformed, StorageUnavailable, ValidationFailed
from core.model import Subscription
from segments.protocol import SegmentStore, Stored
from segments.subscription import dlq
from segments.subscription.layout import Layout, load_layout
from segments.subscription.retry_meta import RetryMeta

PREFIX = "/v1/projects/{project}/subscriptions/{subscription}/dlq/messages"
_locks: dict[str, asyncio.Lock] = {}  # one unsideline or purge at a time per subscription


class DlqMessage(BaseModel):
    message_id: str | None
    group_id: str | None
    topic: str
    segment: int | None
    partition: int | None
    position: int | None
    content_type: str | None
    headers: dict[str, str]
    payload_base64: str
    payload_size: int
    last_status: int | None
    last_error: str | None
    attempts: int
    first_failed_at: datetime | None
    last_failed_at: datetime | None


class DlqPage(BaseModel):
    messages: list[DlqMessage]
    next_cursor: str | None


class UnsidelineRequest(BaseModel):
    """Exactly one of ``message_ids``, ``group_ids``, ``failed_before``."""

    model_config = ConfigDict(extra="forbid")

    message_ids: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None, min_length=1, max_length=10_000
    )
    group_ids: list[Annotated[str, Field(min_length=1, max_length=128)]] | None = Field(
        default=None, min_length=1, max_length=10_000
    )
    failed_before: datetime | None = None
    limit: int = Field(default=1_000, ge=1, le=10_000)


class Unsidelined(BaseModel):
    unsidelined: int
    remaining: int


class Purged(BaseModel):
    purged: int
    remaining: int


def router() -> APIRouter:
    """The DLQ routes: a viewer browses, an owner unsidelines and purges."""
    api = APIRouter(prefix=PREFIX, tags=["dlq"])
    api.add_api_route("", browse, methods=["GET"], **VIEWER)
    api.add_api_route("/unsideline", unsideline, methods=["POST"], **OWNER)
    api.add_api_route("", purge, methods=["DELETE"], **OWNER)
    return api


async def browse(
    project: ProjectName,
    subscription: SubscriptionName,
    admin: AdminDep,
    order: Literal["newest", "oldest"] = "newest",
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=64)] = None,
    group: Annotated[str | None, Query(max_length=128)] = None,
    status: Annotated[int | None, Query(ge=100, le=599)] = None,
    failed_after: datetime | None = None,
    failed_before: datetime | None = None,
) -> DlqPage:
    """One page of live entries, newest or oldest first, filtered by group, last status and
    last failure time; ``next_cursor`` (None on the last page) fetches the next page."""
    after_ms = _ms(failed_after, "failed_after") if failed_after else None
    before_ms = _ms(failed_before, "failed_before") if failed_before else None
    start = _cursor(cursor)
    found = await _open(admin, project, subscription)
    if found is None:
        return DlqPage(messages=[], next_cursor=None)
    store, layout = found
    entries = (await dlq.scan(store, layout)).live()
    if order == "newest":
        entries.reverse()
    if start is not None:
        entries = [
            e for e in entries if (e.position < start if order == "newest" else e.position > start)
        ]

    def keep(msg: Stored) -> bool:
        meta = RetryMeta.of(msg.headers)
        failed = meta.last_failed_ms or 0
        return (
            (group is None or header(msg.headers, GROUP_ID) == group)
            and (status is None or meta.last_status == status)
            and (after_ms is None or failed > after_ms)
            and (before_ms is None or failed < before_ms)
        )

    chosen = [e for e in entries if keep(e)]
    page = chosen[:limit]
    more = len(chosen) > limit
    next_cursor = _encode_cursor(page[-1].position) if more and page else None
    return DlqPage(messages=[_message(m) for m in page], next_cursor=next_cursor)


async def unsideline(
    project: ProjectName, subscription: SubscriptionName, body: UnsidelineRequest, admin: AdminDep
) -> Unsidelined:
    """Replay the selected entries (oldest first, at most ``limit``) through the normal path
    with their attempts reset; ``remaining`` says how many more match."""
    selector = _selector(
        frozenset(body.message_ids) if body.message_ids is not None else None,
        frozenset(body.group_ids) if body.group_ids is not None else None,
        body.failed_before,
        everything=False,
    )
    found = await _open(admin, project, subscription)
    if found is None:
        return Unsidelined(unsidelined=0, remaining=0)
    store, layout = found
    async with _lock(project, subscription):
        matching = dlq.select(await dlq.scan(store, layout), selector)
        chosen = matching[: body.limit]
        await dlq.replay(store, layout, chosen)
    return Unsidelined(unsidelined=len(chosen), remaining=len(matching) - len(chosen))


async def purge(
    project: ProjectName,
    subscription: SubscriptionName,
    admin: AdminDep,
    message_id: Annotated[list[str] | None, Query()] = None,
    group_id: Annotated[list[str] | None, Query()] = None,
    failed_before: datetime | None = None,
    all: bool = False,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1_000,
) -> Purged:
    """Delete the selected entries (oldest first, at most ``limit``) for good."""
    selector = _selector(
        frozenset(message_id) if message_id else None,
        frozenset(group_id) if group_id else None,
        failed_before,
        everything=all,
    )
    found = await _open(admin, project, subscription)
    if found is None:
        return Purged(purged=0, remaining=0)
    store, layout = found
    async with _lock(project, subscription):
        matching = dlq.select(await dlq.scan(store, layout), selector)
        chosen = matching[:limit]
        await dlq.remove(store, layout, (m.position for m in chosen))
    return Purged(purged=len(chosen), remaining=len(matching) - len(chosen))


# ---------------------------------------------------------------- helpers
def _selector(
    ids: frozenset[str] | None,
    groups: frozenset[str] | None,
    failed_before: datetime | None,
    *,
    everything: bool,
) -> dlq.Selector:
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
    before = _ms(failed_before, "failed_before") if failed_before is not None else None
    return dlq.Selector(ids, groups, before, everything)


def _ms(when: datetime, field: str) -> int:
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


def _encode_cursor(position: int) -> str:
    return base64.urlsafe_b64encode(f"dlq:{position}".encode()).decode()


def _cursor(cursor: str | None) -> int | None:
    if cursor is None:
        return None
    try:
        text = base64.urlsafe_b64decode(cursor.encode()).decode()
        kind, _, value = text.partition(":")
        if kind == "dlq" and value.isdigit():
            return int(value)
    except (ValueError, UnicodeDecodeError):
        pass
    raise Malformed("cursor: not a cursor this API gave; start again without one")


def _lock(project: str, subscription: str) -> asyncio.Lock:
    return _locks.setdefault(f"{project}/{subscription}", asyncio.Lock())


async def _open(
    admin: Admin, project: str, subscription: str
) -> tuple[SegmentStore, Layout] | None:
    sub: Subscription = await admin.catalog.get_subscription(project, subscription)
    layout = await load_layout(admin.catalog.store, sub)
    if layout is None:  # nothing was ever dead-lettered or delayed
        return None
    store = admin.stores.get(layout.cluster)
    if store is None:
        raise StorageUnavailable(f"the DLQ's storage cluster {layout.cluster!r} is not here")
    return store, layout


def _rfc3339(epoch_ms: int | None) -> datetime | None:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC) if epoch_ms else None


def _message(msg: Stored) -> DlqMessage:
    meta = RetryMeta.of(msg.headers)
    parts = meta.origin.split(":")
    where: list[int | None] = [int(p) if p.isdigit() else None for p in parts]
    where += [None] * (3 - len(where))
    headers: dict[str, Any] = {k: decode(v) for k, v in own_headers(msg.headers)}
    return DlqMessage(
        message_id=header(msg.headers, MESSAGE_ID),
        group_id=header(msg.headers, GROUP_ID),
        topic=meta.topic,
        segment=where[0],
        partition=where[1],
        position=where[2],
        content_type=header(msg.headers, CONTENT_TYPE),
        headers=headers,
        payload_base64=base64.b64encode(msg.value).decode(),
        payload_size=len(msg.value),
        last_status=meta.last_status,
        last_error=meta.last_error,
        attempts=meta.attempts,
        first_failed_at=_rfc3339(meta.first_failed_ms),
        last_failed_at=_rfc3339(meta.last_failed_ms),
    )

"""``/v1/projects/{project}/subscriptions/{subscription}/dlq/messages``: browse, unsideline,
purge a subscription's dead-letter queue (:mod:`control_plane.services.dead_letters`). A
page cursor is the storage position of the last entry of the page.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import AdminDep, ProjectName, SubscriptionName
from control_plane.services import dead_letters
from core.envelope import CONTENT_TYPE, GROUP_ID, MESSAGE_ID, decode, header, own_headers
from core.errors import Malformed
from segments.protocol import Stored
from segments.subscription.retry_meta import RetryMeta

PREFIX = "/v1/projects/{project}/subscriptions/{subscription}/dlq/messages"


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
    api.add_api_route("/summary", summary, methods=["GET"], **VIEWER)
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
    kind: Literal["heads", "sidelined"] | None = None,
) -> DlqPage:
    """One page of live entries, newest or oldest first, filtered by group, last status,
    last failure time and ``kind``: ``heads`` (attempted and failed) or ``sidelined`` (never
    attempted: they followed their group's failed head); ``next_cursor`` (None on the last
    page) fetches the next page."""
    by = dead_letters.Filter(
        sidelined=None if kind is None else kind == "sidelined",
        newest_first=order == "newest",
        failed_after_ms=_epoch_ms(failed_after, "failed_after"),
        failed_before_ms=_epoch_ms(failed_before, "failed_before"),
        after=_cursor(cursor),
        group=group,
        status=status,
    )
    chosen = await dead_letters.browse(admin, project, subscription, by)
    page = chosen[:limit]
    more = len(chosen) > limit
    next_cursor = _encode_cursor(page[-1].position) if more and page else None
    return DlqPage(messages=[_message(m) for m in page], next_cursor=next_cursor)


async def unsideline(
    project: ProjectName, subscription: SubscriptionName, body: UnsidelineRequest, admin: AdminDep
) -> Unsidelined:
    """Replay the selected entries (oldest first, at most ``limit``) through the normal path
    with their attempts reset; ``remaining`` says how many more match."""
    chosen = dead_letters.selector(
        frozenset(body.message_ids) if body.message_ids is not None else None,
        frozenset(body.group_ids) if body.group_ids is not None else None,
        body.failed_before,
        everything=False,
    )
    done, remaining = await dead_letters.unsideline(
        admin, project, subscription, chosen, body.limit
    )
    return Unsidelined(unsidelined=done, remaining=remaining)


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
    chosen = dead_letters.selector(
        frozenset(message_id) if message_id else None,
        frozenset(group_id) if group_id else None,
        failed_before,
        everything=all,
    )
    done, remaining = await dead_letters.purge(admin, project, subscription, chosen, limit)
    return Purged(purged=done, remaining=remaining)


class ErrorGroupView(BaseModel):
    sidelined: bool = Field(description="never attempted: behind their group's failed head")
    status: int | None
    error: str | None
    count: int
    newest_failed_at: datetime | None


class DlqSummaryView(BaseModel):
    size: int = Field(description="live entries in the DLQ now")
    failed_heads: int = Field(description="entries attempted and failed")
    sidelined: int = Field(description="entries never attempted: behind a failed group head")
    by_error: list[ErrorGroupView] = Field(description="failed heads first, largest first")


async def summary(
    project: ProjectName, subscription: SubscriptionName, admin: AdminDep
) -> DlqSummaryView:
    """What the DLQ holds, as stored: its size, the failed heads and the sidelined followers,
    grouped by error (failed heads first, the largest group first)."""
    sub = await admin.catalog.get_subscription(project, subscription)
    found = await dead_letters.summary(admin.catalog.store, admin.stores, sub)
    return DlqSummaryView(
        size=found.size,
        failed_heads=found.failed_heads,
        sidelined=found.sidelined,
        by_error=[
            ErrorGroupView(
                sidelined=g.sidelined,
                status=g.status,
                error=g.error,
                count=g.count,
                newest_failed_at=_rfc3339(g.newest_ms),
            )
            for g in found.groups
        ],
    )


# ---------------------------------------------------------------- helpers
def _epoch_ms(when: datetime | None, field: str) -> int | None:
    return None if when is None else dead_letters.epoch_ms(when, field)


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

"""``/v1/audit``: the audit reports, read from the relational store (``database_url``).

- ``GET /v1/audit/runs`` -- the latest reconciliation runs with their summaries, newest first,
  a page at a time (``next_cursor``: the older ones);
- ``GET /v1/audit/runs/{id}`` -- one run with its per-subscription counts and the lost, late
  and duplicate message ids;
- ``GET /v1/audit/hourly?project=&subscription=&since=`` -- hourly report rows;
- ``GET /v1/audit/cutovers`` -- cutover verifications with their findings, paged likewise.

The routes are plain ``def``: FastAPI runs them in its thread pool, so the synchronous
SQLAlchemy calls never block the event loop. The store is opened on first use.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi import Path as FastPath

from control_plane.api.auth import ADMIN
from control_plane.services.listing import BAD_CURSOR, decode_cursor, encode_cursor
from control_plane.services.report_store import shared_store
from core.errors import Malformed, NotFound, ValidationFailed
from reports.models import (
    CutoverVerificationRow,
    HourlyReportRow,
    ReconciliationRunRow,
)
from reports.store import ReportStore

MAX_ID = 2**63 - 1  # a run id is a SQL BIGINT: a larger one is refused (422), not a 500


def rfc3339(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _summary(run: ReconciliationRunRow) -> dict[str, Any]:
    return {
        "id": run.id,
        "mode": run.mode,
        "source": run.source,
        "started_at": rfc3339(run.started_at_ms),
        "duration_ms": run.duration_ms,
        "since": rfc3339(run.since_ms),
        "until": rfc3339(run.until_ms),
        "as_of": rfc3339(run.as_of_ms),
        "horizon_ms": run.horizon_ms,
        "events": run.events,
        "expected": run.expected,
        "lost": run.lost,
        "late": run.late,
        "pending": run.pending,
        "duplicates": run.duplicates,
        "unaccepted": run.unaccepted,
    }


def _hourly(row: HourlyReportRow) -> dict[str, Any]:
    return {
        "subscription": row.subscription,
        "window_start": rfc3339(row.window_start_ms),
        "window_end": rfc3339(row.window_end_ms),
        "accepted": row.accepted,
        "attempted": row.attempted,
        "delivered": row.delivered,
        "filtered": row.filtered,
        "retried": row.retried,
        "dead_lettered": row.dead_lettered,
        "failed_attempts": row.failed_attempts,
        "failure_rate": row.failed_attempts / row.attempted if row.attempted else None,
        "latency_ms": {
            "p50": row.latency_p50_ms,
            "p95": row.latency_p95_ms,
            "p99": row.latency_p99_ms,
        },
        "updated_at": rfc3339(row.updated_at_ms),
    }


def _detail(run: ReconciliationRunRow) -> dict[str, Any]:
    findings: dict[str, list[dict[str, Any]]] = {"lost": [], "late": [], "duplicates": []}
    for f in run.findings:
        key = "duplicates" if f.kind == "duplicate" else f.kind
        findings.setdefault(key, []).append(
            {
                "subscription": f.subscription,
                "message_id": f.message_id,
                "accepted_at": rfc3339(f.accepted_at_ms),
                "terminal_at": rfc3339(f.terminal_at_ms),
                "deliveries": f.count if key == "duplicates" else None,
            }
        )
    return {**_summary(run), "subscriptions": json.loads(run.tallies), **findings}


def _cutover(c: CutoverVerificationRow) -> dict[str, Any]:
    return {
        "id": c.id,
        "project": c.project,
        "topic": c.topic,
        "from_segment": c.from_segment,
        "to_segment": c.to_segment,
        "sealed_at": rfc3339(c.sealed_at_ms),
        "verified_at": rfc3339(c.verified_at_ms),
        "old_segment_messages": c.old_segment_messages,
        "new_segment_messages": c.new_segment_messages,
        "groups_across": c.groups_across,
        "ok": c.ok,
        "findings": json.loads(c.findings),
    }


def _since_ms(since: str | None) -> int | None:
    if since is None:
        return None
    try:
        moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
    except ValueError:
        raise ValidationFailed(f"since: {since!r} is not an RFC 3339 time") from None
    if moment.tzinfo is None:
        raise ValidationFailed("since: give a time zone (Z or +hh:mm)")
    return int(moment.timestamp() * 1000)


OlderCursor = Annotated[
    str | None, Query(max_length=200, description="next_cursor of the page before (newer)")
]


def _older_than(cursor: str | None) -> int | None:
    """The id a newest-first page's cursor names: the rows older than it come next."""
    if cursor is None:
        return None
    position = decode_cursor(cursor)
    if position.before or not position.name.isdigit() or int(position.name) > MAX_ID:
        raise Malformed(BAD_CURSOR)
    return int(position.name)


def _next(found: Sequence[ReconciliationRunRow | CutoverVerificationRow], limit: int) -> str | None:
    """The cursor of the page after ``found[:limit]`` (``found`` read one row more than a
    page, to know whether there is one)."""
    return encode_cursor(str(found[limit - 1].id)) if len(found) > limit else None


def latest_run_summary(database_url: str) -> dict[str, Any] | None:
    """The newest reconciliation run's summary, None if there is none (blocking: run it in a
    thread)."""
    runs = shared_store(database_url).runs(1)
    return _summary(runs[0]) | {"started_at_ms": runs[0].started_at_ms} if runs else None


def router(database_url: str) -> APIRouter:
    """The audit routes on the report database at ``database_url``: admins only (the
    reports span every project)."""
    api = APIRouter(prefix="/v1/audit", tags=["audit"])

    def store() -> ReportStore:
        return shared_store(database_url)

    @api.get("/runs", **ADMIN)
    def list_runs(
        limit: Annotated[int, Query(ge=1, le=500)] = 20, cursor: OlderCursor = None
    ) -> dict[str, Any]:
        """The latest reconciliation runs, newest first; ``next_cursor`` (None: no older
        run) asks the runs older than this page's."""
        found = store().runs(limit + 1, _older_than(cursor))
        return {"runs": [_summary(r) for r in found[:limit]], "next_cursor": _next(found, limit)}

    @api.get("/runs/{run_id}", **ADMIN)
    def get_run(run_id: Annotated[int, FastPath(ge=0, le=MAX_ID)]) -> dict[str, Any]:
        """One run: its summary, counts per subscription and the message ids it names."""
        run = store().run(run_id)
        if run is None:
            raise NotFound(f"reconciliation run {run_id} does not exist")
        return _detail(run)

    @api.get("/hourly", **ADMIN)
    def hourly(
        project: Annotated[str | None, Query(max_length=128)] = None,
        subscription: Annotated[
            str | None, Query(max_length=300, description="name, or project/name")
        ] = None,
        since: Annotated[str | None, Query(description="RFC 3339")] = None,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1_000,
    ) -> dict[str, Any]:
        """Hourly report rows, oldest window first."""
        if subscription is not None and "/" not in subscription:
            if project is None:
                raise ValidationFailed("subscription: give project too, or project/name")
            subscription = f"{project}/{subscription}"
        rows = store().hourly(
            subscription=subscription, project=project, since_ms=_since_ms(since), limit=limit
        )
        return {"rows": [_hourly(r) for r in rows]}

    @api.get("/cutovers", **ADMIN)
    def cutovers(
        limit: Annotated[int, Query(ge=1, le=500)] = 100, cursor: OlderCursor = None
    ) -> dict[str, Any]:
        """Cutover verifications, newest first; ``next_cursor`` (None: no older one) asks
        the verifications older than this page's."""
        found = store().cutovers(limit + 1, _older_than(cursor))
        return {
            "cutovers": [_cutover(c) for c in found[:limit]],
            "next_cursor": _next(found, limit),
        }

    return api

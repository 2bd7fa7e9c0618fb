"""Audit reports of the Spark pipeline (``/v1/audit``, read from the relational store):
the latest reconciliation runs (and each run's lost, late and duplicate ids), the hourly
delivery report, cutover verifications, as tables of the columns named here."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from control_plane.client import AdminClient, ApiError, NotAvailable, path
from control_plane.ui.deps import ApiDep, SessionDep
from control_plane.ui.render import render, table_of

router = APIRouter()
SHOWN = 1000

RUN_COLUMNS = (
    "id",
    "started_at",
    "mode",
    "since",
    "until",
    "events",
    "expected",
    "lost",
    "late",
    "duplicates",
    "pending",
    "unaccepted",
    "duration_ms",
    "source",
)
HOURLY_COLUMNS = (
    "subscription",
    "window_start",
    "accepted",
    "attempted",
    "delivered",
    "filtered",
    "retried",
    "dead_lettered",
    "failed_attempts",
    "failure_rate",
    "latency_ms.p50",
    "latency_ms.p95",
    "latency_ms.p99",
)
CUTOVER_COLUMNS = (
    "project",
    "topic",
    "from_segment",
    "to_segment",
    "ok",
    "sealed_at",
    "verified_at",
    "old_segment_messages",
    "new_segment_messages",
    "groups_across",
    "findings",
)


def _why(exc: ApiError) -> str:
    """The first line of an error, without the SQL a database error may carry."""
    text = exc.message.split("\n", 1)[0].split("[SQL", 1)[0].strip()
    return text if len(text) <= 240 else text[:239] + "…"


async def _report(
    api: AdminClient, url: str, prefer: tuple[str, ...], params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A report as a table, or why there is none (a report database that is not migrated
    yet answers 503: the page says so in that section and the others still show)."""
    try:
        value = await api.get(url, params)
    except NotAvailable:
        return {"missing": "not available on this control plane"}
    except ApiError as exc:
        if exc.status == 0 or (exc.status >= 500 and exc.status != 503):
            raise
        return {"missing": _why(exc)}
    # The named columns, in a readable order, so the tables fit a screen (a run's page shows
    # every field of the run; a report whose fields are all unknown still shows them).
    columns, rows = table_of(value, prefer, limit=len(prefer))
    older = value.get("next_cursor") if isinstance(value, dict) else None
    return {"columns": columns, "rows": rows, "missing": None, "older": older}


FILTERS = ("project", "subscription", "since")
"""The query parameters of /ui/audit that filter the hourly report."""
PAGED = ("runs_cursor", "cutovers_cursor")
"""The query parameters of /ui/audit that page runs and cutovers (the API's ``cursor``)."""


@router.get("/ui/audit")
async def audit(request: Request, session: SessionDep, api: ApiDep) -> Response:
    params = request.query_params
    query = {k: params.get(k, "") for k in (*FILTERS, *PAGED)}
    # A cursor too long for the API, or one it did not give, shows as that table's error.
    runs_at, cutovers_at = ({"cursor": query[k][:201]} if query[k] else None for k in PAGED)
    hourly_query = {k: query[k] for k in FILTERS}
    runs = await _report(api, path("v1", "audit", "runs"), RUN_COLUMNS, runs_at)
    hourly = await _report(api, path("v1", "audit", "hourly"), HOURLY_COLUMNS, hourly_query)
    cutovers = await _report(api, path("v1", "audit", "cutovers"), CUTOVER_COLUMNS, cutovers_at)
    return render(
        request, "audit.html", session, runs=runs, hourly=hourly, cutovers=cutovers, query=query
    )


@router.get("/ui/audit/runs/{run_id}")
async def run(
    request: Request,
    session: SessionDep,
    api: ApiDep,
    run_id: str = Path(pattern=r"^[A-Za-z0-9_.:-]{1,128}$"),
) -> Response:
    try:
        found = await api.get(path("v1", "audit", "runs", run_id))
        missing = None
    except NotAvailable:
        found, missing = {}, "not available on this control plane"
    except ApiError as exc:
        if exc.status != 503:
            raise
        found, missing = {}, _why(exc)
    scalars = {k: v for k, v in found.items() if not isinstance(v, list | dict)}
    # The per-subscription counts and the lost / late / duplicate ids, each as a table
    # (the first SHOWN rows: a run lists up to 10 000 ids of a kind).
    lists = {
        k: {"total": len(v), **dict(zip(("columns", "rows"), table_of(v[:SHOWN]), strict=True))}
        for k, v in found.items()
        if isinstance(v, list)
    }
    return render(
        request,
        "audit_run.html",
        session,
        run_id=run_id,
        scalars=scalars,
        lists=lists,
        missing=missing,
    )

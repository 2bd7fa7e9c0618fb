"""Audit reports of the Spark pipeline: reconciliation runs (and each run's lost, late and
duplicate ids), hourly delivery figures, cutover verifications. The pages show the tables
the API returns, whatever their columns, so a new figure needs no change here."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from ..client import AdminClient, ApiError, NotAvailable, path
from .deps import ApiDep, SessionDep
from .render import render, table_of

router = APIRouter()


async def _report(
    api: AdminClient, url: str, params: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A report as a table, or why there is none."""
    try:
        value = await api.get(url, params)
    except NotAvailable:
        return {"missing": "not available on this control plane"}
    except ApiError as exc:
        if exc.status in (0,) or exc.status >= 500:
            raise
        return {"missing": exc.message}
    columns, rows = table_of(value)
    return {"columns": columns, "rows": rows, "missing": None}


@router.get("/ui/audit")
async def audit(request: Request, session: SessionDep, api: ApiDep) -> Response:
    query = {k: request.query_params.get(k, "") for k in ("project", "subscription", "since")}
    runs = await _report(api, path("v1", "audit", "runs"))
    hourly = await _report(api, path("v1", "audit", "hourly"), dict(query))
    cutovers = await _report(api, path("v1", "audit", "cutovers"))
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
    scalars = {k: v for k, v in found.items() if not isinstance(v, list | dict)}
    lists = {k: v for k, v in found.items() if isinstance(v, list | dict)}
    return render(
        request,
        "audit_run.html",
        session,
        run_id=run_id,
        scalars=scalars,
        lists=lists,
        missing=missing,
    )

"""What every httpbus service serves for operations: ``/healthz``, ``/readyz`` and
``/metrics`` (Prometheus: the API's requests and latency by route, the roles this process
leads, the cutovers it drives, the failovers it started, the newest audit run's findings)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from control_plane.api.audit import latest_run_summary
from control_plane.api.deps import AdminDep
from control_plane.api.metrics import ControlPlaneMetrics, MetricsMiddleware, roles_state
from core.errors import HttpbusError, NotReady
from core.version import VERSION

log = logging.getLogger(__name__)


def install(app: FastAPI, database_url: str) -> None:
    """Count ``app``'s requests and serve the operations routes. ``/metrics`` reports the
    roles in ``app.state.roles`` (none before startup)."""
    metrics = ControlPlaneMetrics()
    metrics.watch(
        lambda: {
            **roles_state(getattr(app.state, "roles", ())),
            "audit": getattr(app.state, "audit_latest", None),
        }
    )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.include_router(_router(metrics, database_url))


def _router(metrics: ControlPlaneMetrics, database_url: str) -> APIRouter:
    api = APIRouter(tags=["ops"])

    @api.get(
        "/metrics",
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    async def metrics_text(request: Request) -> Response:
        """Prometheus metrics: API requests and latency by route, leaders, active cutovers,
        the newest audit run's findings."""
        request.app.state.audit_latest = await _latest_audit(database_url)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @api.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok", "service": "control-plane", "version": VERSION}

    @api.get("/readyz")
    async def readyz(request: Request, admin: AdminDep) -> dict[str, str]:
        """Readiness: the metastore answers a read within two seconds."""
        await admin.check_ready()
        children_down = getattr(request.app.state, "children_down", None)  # httpbus dev
        if children_down is not None and (down := children_down()):
            raise NotReady(f"down, being restarted: {', '.join(down)}", retry_after=2)
        return {"status": "ready"}

    return api


async def _latest_audit(database_url: str) -> dict[str, Any] | None:
    """The newest audit run's summary for /metrics; None if the report store is away (the
    scrape must still answer)."""
    try:
        return await run_in_threadpool(latest_run_summary, database_url)
    except HttpbusError as exc:  # a database away, a schema not made yet
        log.warning("metrics: the audit report store does not answer: %s", exc)
        return None

"""The control plane's ASGI application: health, OpenAPI and the admin API."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool

from control_plane import api, ui
from control_plane.api import audit as audit_api
from control_plane.api import cutover as cutover_api
from control_plane.api import dlq as dlq_api
from control_plane.api import failover as failover_api
from control_plane.api import migration as migration_api
from control_plane.api import trace as trace_api
from control_plane.api.auth import Authenticator
from control_plane.leaders.assigner import Assigner
from control_plane.leaders.cutovers import open_cutovers
from control_plane.leaders.trace_indexer import TraceIndexer
from control_plane.metrics import ControlPlaneMetrics, MetricsMiddleware
from control_plane.services.admin import Admin
from control_plane.services.topic_migrations import Migrations
from control_plane.settings import ControlPlaneSettings
from core import http_errors
from core.errors import HttpbusError, MetaStoreUnavailable, NotReady
from core.version import VERSION
from metastore.catalog import Catalog
from metastore.config import open_metastore
from metastore.protocol import MetaStore
from reports import migrate
from reports.migration_windows import MigrationWindows
from reports.principals import PrincipalStore
from reports.trace import TraceIndex
from segments.protocol import SegmentStore
from segments.registry import open_stores

log = logging.getLogger(__name__)


def create_app(
    settings: ControlPlaneSettings,
    *,
    metastore: MetaStore | None = None,
    stores: dict[str, SegmentStore] | None = None,
) -> FastAPI:
    """Build the control plane. ``metastore`` and ``stores`` are opened from ``settings``
    at startup unless given (already started) by the caller."""
    if settings.admin_token is None:
        raise ValueError("admin_token is required (set HTTPBUS_ADMIN_TOKEN)")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            meta = metastore
            if meta is None:
                meta = await stack.enter_async_context(open_metastore(settings.metastore))
            opened = await open_stores(stack, settings.clusters, stores)
            if settings.migrate_reports_on_start:
                await _migrate_reports(settings.database_url)
            assigner = Assigner(meta, Catalog(meta), settings.member_id, settings.assign_interval_s)
            app.state.assigner = await stack.enter_async_context(assigner)
            app.state.cutovers = await open_cutovers(stack, meta, opened, settings)
            app.state.migrations = Migrations(app.state.cutovers, opened)
            if settings.trace_index:
                app.state.trace_indexer = await stack.enter_async_context(
                    _trace_indexer(settings, meta, opened, trace_index)
                )
            await app.state.ui_revoked.attach(meta)  # logouts shared by every process
            stack.push_async_callback(app.state.ui_revoked.aclose)
            app.state.admin = Admin(
                Catalog(meta),
                settings.clusters,
                opened,
                settings.default_cluster,
                settings.storage_topic_prefix,
                settings.endpoint_policy,
            )
            yield

    engine = audit_api.shared_store(settings.database_url).engine  # one pool
    trace_index = TraceIndex(engine)
    app = FastAPI(title="httpbus control plane", version=VERSION, lifespan=lifespan)
    http_errors.install(app)
    metrics = ControlPlaneMetrics()
    metrics.watch(lambda: _state(app))
    app.add_middleware(MetricsMiddleware, metrics=metrics)

    @app.get(
        "/metrics",
        tags=["ops"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    async def metrics_text() -> Response:
        """Prometheus metrics: API requests and latency by route, leaders, active cutovers,
        the newest audit run's findings."""
        app.state.audit_latest = await _latest_audit(settings.database_url)
        return Response(metrics.render(), media_type="text/plain; version=0.0.4")

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        """Liveness: the process serves requests."""
        return {"status": "ok", "service": "control-plane", "version": VERSION}

    @app.get("/readyz", tags=["ops"])
    async def readyz(request: Request) -> dict[str, str]:
        """Readiness: the metastore answers a read within two seconds."""
        admin: Admin = request.app.state.admin
        try:
            async with asyncio.timeout(2.0):
                await admin.catalog.list_projects()
        except (TimeoutError, HttpbusError) as exc:
            raise MetaStoreUnavailable("the metastore does not answer", retry_after=5) from exc
        children_down = getattr(request.app.state, "children_down", None)  # httpbus dev
        if children_down is not None and (down := children_down()):
            raise NotReady(f"down, being restarted: {', '.join(down)}", retry_after=2)
        return {"status": "ready"}

    app.state.migration_windows = MigrationWindows(engine)
    app.state.authenticator = Authenticator(
        settings.admin_token.get_secret_value(), PrincipalStore(engine), ui.session_identity
    )
    app.include_router(api.router())
    app.include_router(cutover_api.router)
    app.include_router(migration_api.router)
    app.include_router(failover_api.router)
    ui.install(
        app,
        settings.admin_token.get_secret_value(),
        sorted(settings.clusters),
        settings.default_cluster,
        public_url=settings.public_url,
    )
    app.include_router(dlq_api.router())
    app.include_router(trace_api.router(trace_index))
    app.include_router(audit_api.router(settings.database_url))
    return app


def _state(app: FastAPI) -> dict[str, Any]:
    """What /metrics reports of this process at scrape time (nothing before startup)."""
    assigner = getattr(app.state, "assigner", None)
    cutovers = getattr(app.state, "cutovers", None)
    coordinator = cutovers.coordinator if cutovers is not None else None
    leader = {}
    if assigner is not None:
        leader["assigner"] = assigner.is_leader
    if coordinator is not None:
        leader["cutover"] = coordinator.is_leader
    return {
        "leader": leader,
        "cutovers_active": coordinator.driving if coordinator else 0,
        "failovers": dict(coordinator.monitor.failovers)
        if coordinator is not None and coordinator.monitor is not None
        else {},
        "audit": getattr(app.state, "audit_latest", None),
    }


def _trace_indexer(
    settings: ControlPlaneSettings,
    meta: MetaStore,
    stores: dict[str, SegmentStore],
    index: TraceIndex,
) -> TraceIndexer:
    """The indexer of the audit topic (where the producers and workers write it)."""
    cluster = settings.audit.cluster or settings.default_cluster
    return TraceIndexer(
        meta,
        stores[cluster],
        settings.audit.topic,
        index,
        settings.member_id,
        retention_s=settings.trace_retention_s,
    )


async def _latest_audit(database_url: str) -> dict[str, Any] | None:
    """The newest audit run's summary for /metrics; None if the report store is away (the
    scrape must still answer)."""
    try:
        return await run_in_threadpool(audit_api.latest_run_summary, database_url)
    except HttpbusError as exc:  # a database away, a schema not made yet
        log.warning("metrics: the audit report store does not answer: %s", exc)
        return None


async def _migrate_reports(url: str) -> None:
    """Bring the report database to the newest schema, so the audit pages work on a fresh
    install. A failure (the database is down, a replica migrating at the same moment) is
    logged, not fatal: the audit routes answer 503 until ``httpbus db upgrade`` succeeds."""
    try:
        await asyncio.to_thread(migrate.upgrade, url)
    except Exception as exc:  # any failure leaves the control plane serving
        log.warning("report database not migrated (%s): %s", url.split("@")[-1], exc)

"""The control plane's ASGI application, assembled: the admin API (``api``), the web UI
(``ui``), the services they share (``services``) and the elected roles (``leaders``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager

from fastapi import FastAPI

from control_plane import api, ui
from control_plane.api import ops
from control_plane.api.auth import Authenticator
from control_plane.leaders.context import LeaderContext
from control_plane.leaders.roles import roles
from control_plane.request_guard import RequestGuard
from control_plane.services.admin import Admin
from control_plane.services.cutovers import cutovers_of
from control_plane.services.listing import SearchTexts
from control_plane.services.report_store import migrate_reports, shared_store
from control_plane.services.topic_migrations import Migrations
from control_plane.settings import ControlPlaneSettings
from core import http_errors
from core.version import VERSION
from metastore.config import enter_metastore
from metastore.protocol import MetaStore
from reports.migration_windows import MigrationWindows
from reports.principals import PrincipalStore
from reports.trace import TraceIndex
from segments.protocol import SegmentStore
from segments.registry import open_stores


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
    token = settings.admin_token.get_secret_value()
    engine = shared_store(settings.database_url).engine  # one pool
    trace_index = TraceIndex(engine)
    lifespan = _lifespan(settings, metastore, stores, trace_index)
    app = FastAPI(title="httpbus control plane", version=VERSION, lifespan=lifespan)
    http_errors.install(app)
    ops.install(app, settings.database_url)
    app.state.member_id = settings.member_id
    app.state.search_texts = SearchTexts(settings.list_search_cache_s)
    app.state.migration_windows = MigrationWindows(engine)
    app.state.authenticator = Authenticator(token, PrincipalStore(engine), ui.session_identity)
    app.include_router(api.router(settings.database_url, trace_index))
    clusters = sorted(settings.clusters)
    ui.install(app, token, clusters, settings.default_cluster, public_url=settings.public_url)
    app.add_middleware(
        RequestGuard, max_body_bytes=settings.max_body_bytes, refuse_page=ui.login_answer
    )
    return app


def _lifespan(
    settings: ControlPlaneSettings,
    metastore: MetaStore | None,
    stores: dict[str, SegmentStore] | None,
    trace_index: TraceIndex,
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Open the metastore and the stores, set the services on ``app.state`` and enter
    every elected role; all closed in reverse at shutdown."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            meta = await enter_metastore(stack, settings.metastore, metastore)
            opened = await open_stores(stack, settings.clusters, stores)
            if settings.migrate_reports_on_start:
                await migrate_reports(settings.database_url)
            app.state.admin = Admin.of(settings, meta, opened)
            app.state.cutovers = cutovers = cutovers_of(settings, meta)
            app.state.migrations = Migrations(cutovers, opened)
            context = LeaderContext(cutovers, opened, settings.member_id)
            app.state.roles = [
                await stack.enter_async_context(role)
                for role in roles(settings, context, trace_index)
            ]
            stack.push_async_callback(app.state.search_texts.aclose)
            await app.state.ui_revoked.attach(meta)  # logouts shared by every process
            stack.push_async_callback(app.state.ui_revoked.aclose)
            yield

    return lifespan

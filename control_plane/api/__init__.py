"""The admin REST API under ``/v1``: every route declares the role it needs
(:mod:`.auth`; the table is in docs/security.md). The routers only translate HTTP: what a
route does is a service's (``control_plane.services``), set on ``app.state`` at startup."""

from __future__ import annotations

from fastapi import APIRouter

from control_plane.api import (
    archive,
    audit,
    catalog,
    cutover,
    dlq,
    failover,
    grants,
    migration,
    overview,
    principals,
    projects,
    quotas,
    replay,
    resend,
    search,
    signing_keys,
    subscriptions,
    tokens,
    topic_schemas,
    topics,
    trace,
)
from reports.trace import TraceIndex


def router(database_url: str, trace_index: TraceIndex) -> APIRouter:
    """Every route of the API; the audit reports and the trace index are read from the
    report database at ``database_url``."""
    api = APIRouter()
    for module in (
        projects,
        quotas,
        topics,
        archive,
        topic_schemas,
        subscriptions,
        tokens,
        grants,
        catalog,
        principals,
        cutover,
        migration,
        failover,
        signing_keys,
        replay,
    ):
        api.include_router(module.router)
    api.include_router(dlq.router())
    api.include_router(trace.router(trace_index))
    api.include_router(resend.router(trace_index))
    api.include_router(search.router(trace_index))
    api.include_router(audit.router(database_url))
    api.include_router(overview.router(database_url))
    return api

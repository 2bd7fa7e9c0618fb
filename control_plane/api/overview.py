"""``GET /v1/overview``: the platform at a glance for the on-call operator, filtered to the
projects the caller may see (:mod:`control_plane.services.overview`); an admin also gets the
newest audit reconciliation's findings."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter

from control_plane.api.audit import latest_run_summary
from control_plane.api.auth import ANY, PrincipalDep
from control_plane.api.deps import AdminDep
from control_plane.services.overview import Overview, PublishSampler
from core.errors import HttpbusError


def router(database_url: str) -> APIRouter:
    """The overview route; audit findings come from the report database at ``database_url``."""
    api = APIRouter(prefix="/v1", tags=["overview"])
    sampler = PublishSampler()  # this process's last end positions: the publish rate

    @api.get("/overview", **ANY)
    async def overview(admin: AdminDep, principal: PrincipalDep) -> dict[str, Any]:
        """Rates, the last hour's deliveries, failures and dead letters, what is failing
        (circuits open or half-open, failing attempts), the largest lag and the oldest
        unacked message, DLQs that grew in the last hour, disabled endpoints, cutovers,
        failovers and migrations in flight, and (admins) the last audit findings: one
        answer for the whole page. Only the projects the caller may see."""
        projects = None if principal.is_admin else principal.projects()
        body = await Overview(admin.catalog.store, admin.stores, sampler).read(projects)
        body["audit"] = await _audit(database_url) if principal.is_admin else None
        return body

    return api


async def _audit(database_url: str) -> dict[str, Any] | None:
    """The newest reconciliation run's findings; None when there is none or the report
    database does not answer (the overview still answers)."""
    try:
        return await asyncio.to_thread(latest_run_summary, database_url)
    except HttpbusError:  # a database away, a schema not made yet
        return None

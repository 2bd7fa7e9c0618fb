"""``/v1/projects/{project}/quota``: an admin sets a project's quota; its viewers read it
with its usage (docs/quotas.md)."""

from __future__ import annotations

from fastapi import APIRouter

from control_plane.api.auth import ADMIN, VIEWER
from control_plane.api.deps import AdminDep, ProjectName
from core.quotas import ProjectQuota, QuotaUsage

router = APIRouter(prefix="/v1/projects", tags=["projects"])


@router.get("/{project}/quota", **VIEWER)
async def get_quota(project: ProjectName, admin: AdminDep) -> QuotaUsage:
    """The project's quota (null: unlimited) and its usage: topics and subscriptions now,
    messages and bytes per second accepted by all producers together (about a second old)."""
    return await admin.catalog.quotas.usage(project)


@router.put("/{project}/quota", **ADMIN)
async def set_quota(project: ProjectName, body: ProjectQuota, admin: AdminDep) -> QuotaUsage:
    """Replace the project's quota; a field left out (or null) is unlimited. Producers apply
    a new rate within about a second; a count below today's usage refuses further creates
    (409 ``quota_exceeded``) and deletes nothing."""
    await admin.catalog.quotas.set(project, body)
    return await admin.catalog.quotas.usage(project)

"""``/v1/projects``."""

from __future__ import annotations

from fastapi import APIRouter, status

from core.model import Project

from .auth import ADMIN, ANY, OWNER, VIEWER, PrincipalDep
from .deps import AdminDep, Limit, Offset, ProjectName, page
from .schemas import Page, ProjectCreate, ProjectUpdate

router = APIRouter(prefix="/v1/projects", tags=["projects"])


@router.post("", status_code=status.HTTP_201_CREATED, **ADMIN)
async def create_project(body: ProjectCreate, admin: AdminDep) -> Project:
    return await admin.create_project(Project(name=body.name, description=body.description))


@router.get("", **ANY)
async def list_projects(
    admin: AdminDep, principal: PrincipalDep, offset: Offset = 0, limit: Limit = 100
) -> Page[Project]:
    """The projects the caller holds a role in (an admin: every project)."""
    names = await admin.catalog.list_projects()
    if not principal.is_admin:
        names = [n for n in names if n in principal.projects()]
    return await page(names, offset, limit, admin.catalog.get_project)


@router.get("/{project}", **VIEWER)
async def get_project(project: ProjectName, admin: AdminDep) -> Project:
    return await admin.catalog.get_project(project)


@router.put("/{project}", **OWNER)
async def update_project(project: ProjectName, body: ProjectUpdate, admin: AdminDep) -> Project:
    current = await admin.catalog.get_project(project)
    changed = current.model_copy(update={"description": body.description, "version": body.version})
    return await admin.catalog.update_project(changed)


@router.delete("/{project}", status_code=status.HTTP_204_NO_CONTENT, **ADMIN)
async def delete_project(project: ProjectName, admin: AdminDep) -> None:
    await admin.catalog.delete_project(project)

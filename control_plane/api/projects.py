"""``/v1/projects``."""

from __future__ import annotations

from fastapi import APIRouter, status

from core.model import Project

from .deps import AdminDep, Limit, Offset, ProjectName, page
from .schemas import Page, ProjectCreate, ProjectUpdate

router = APIRouter(prefix="/v1/projects", tags=["projects"])


@router.post("", status_code=status.HTTP_201_CREATED)
async def create_project(body: ProjectCreate, admin: AdminDep) -> Project:
    return await admin.create_project(Project(name=body.name, description=body.description))


@router.get("")
async def list_projects(admin: AdminDep, offset: Offset = 0, limit: Limit = 100) -> Page[Project]:
    names = await admin.catalog.list_projects()
    return await page(names, offset, limit, admin.catalog.get_project)


@router.get("/{project}")
async def get_project(project: ProjectName, admin: AdminDep) -> Project:
    return await admin.catalog.get_project(project)


@router.put("/{project}")
async def update_project(project: ProjectName, body: ProjectUpdate, admin: AdminDep) -> Project:
    current = await admin.catalog.get_project(project)
    changed = current.model_copy(update={"description": body.description, "version": body.version})
    return await admin.catalog.update_project(changed)


@router.delete("/{project}", status_code=status.HTTP_204_NO_CONTENT)
async def delete_project(project: ProjectName, admin: AdminDep) -> None:
    await admin.catalog.delete_project(project)

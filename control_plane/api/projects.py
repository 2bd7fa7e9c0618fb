"""``/v1/projects``."""

from __future__ import annotations

from fastapi import APIRouter, status

from control_plane.api.auth import ADMIN, ANY, OWNER, VIEWER, PrincipalDep
from control_plane.api.deps import AdminDep, ListQueryDep, ProjectName, SearchTextsDep, page
from control_plane.api.schemas import Page, ProjectCreate, ProjectShown, ProjectUpdate, ProjectView
from control_plane.services.admin import new_signing_secret

router = APIRouter(prefix="/v1/projects", tags=["projects"])


@router.post("", status_code=status.HTTP_201_CREATED, **ADMIN)
async def create_project(body: ProjectCreate, admin: AdminDep) -> ProjectShown:
    """Create a project; the answer shows its notification secret this once."""
    project = await admin.create_project(
        body.name, body.description, body.notification_url, body.notifications
    )
    return ProjectShown(
        **ProjectView.of(project).model_dump(), notification_secret=project.notification_secret
    )


@router.get("", **ANY)
async def list_projects(
    admin: AdminDep, principal: PrincipalDep, query: ListQueryDep, search: SearchTextsDep
) -> Page[ProjectView]:
    """The projects the caller holds a role in (an admin: every project); ``q`` searches
    names and descriptions; ``next_cursor`` (null on the last page) and ``prev_cursor`` ask
    for the pages around."""
    names = await admin.catalog.list_projects()
    if not principal.is_admin:
        names = [n for n in names if n in principal.projects()]

    async def fetch(name: str) -> ProjectView:
        return ProjectView.of(await admin.catalog.get_project(name))

    async def describe(names: list[str]) -> dict[str, str]:
        return {p.name: p.description for p in await admin.catalog.describe_projects(names)}

    return await page(names, query, fetch, search.of("projects", describe))


@router.get("/{project}", **VIEWER)
async def get_project(project: ProjectName, admin: AdminDep) -> ProjectView:
    return ProjectView.of(await admin.catalog.get_project(project))


@router.put("/{project}", **OWNER)
async def update_project(
    project: ProjectName, body: ProjectUpdate, admin: AdminDep, search: SearchTextsDep
) -> ProjectShown:
    """Replace the description; the notification URL and the operational events wanted
    (``notifications``) too when the body names them (a null URL removes it; absent keeps
    them, so a client that only knows the description cannot drop them). A project made
    before notification secrets existed gets one with its first
    notification URL, shown this once."""
    search.forget("projects", project)
    current = await admin.catalog.get_project(project)
    url = current.notification_url
    if "notification_url" in body.model_fields_set:
        url = body.notification_url
        admin.check_notification_url(url)
    wanted = current.notifications if body.notifications is None else body.notifications
    made = None
    if url is not None and current.notification_secret is None:
        made = new_signing_secret()
    changed = current.model_copy(
        update={
            "description": body.description,
            "notification_url": url,
            "notification_secret": made or current.notification_secret,
            "notifications": wanted,
            "version": body.version,
        }
    )
    updated = await admin.catalog.update_project(changed)
    return ProjectShown(**ProjectView.of(updated).model_dump(), notification_secret=made)


@router.delete("/{project}", status_code=status.HTTP_204_NO_CONTENT, **ADMIN)
async def delete_project(project: ProjectName, admin: AdminDep) -> None:
    await admin.catalog.delete_project(project)

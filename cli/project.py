"""``httpbus project``: create, list, update and delete projects; ``project quota``."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import quota
from cli.kit import Call, Columns, Limit, Offset, Project, Yes, command, listing, post, removal
from cli.kit import update as updated
from control_plane.client import path

app = typer.Typer(help="Projects: create, list, update, delete; quotas.", no_args_is_help=True)
app.add_typer(quota.app, name="quota")
Description = Annotated[str, typer.Option(help="What the project is for.")]
PROJECTS = Columns(
    "projects",
    ("name", "description", "created"),
    lambda p: (p["name"], p.get("description", ""), p.get("created_at", "")),
)


@command(app)
def create(name: Project, description: Description = "") -> Call:
    """Create a project."""
    body = {"name": name, "description": description}
    return post(path("v1", "projects"), body, text=lambda p: f"created project {p['name']}")


@command(app, "list")
def list_(offset: Offset = 0, limit: Limit = 100) -> Call:
    """List projects (a page at a time)."""
    return listing(path("v1", "projects"), PROJECTS, page=(offset, limit))


@command(app)
def update(name: Project, description: Description) -> Call:
    """Change a project's description.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile)."""
    return updated(
        path("v1", "projects", name),
        lambda current: {"description": description, "version": current["version"]},
        fields=lambda p: {"description": p["description"]},
        said=f"updated project {name}",
    )


@command(app)
def delete(name: Project, yes: Yes = False) -> Call:
    """Delete an empty project (asks first unless --yes).

    Refused (exit 4) while it has topics or subscriptions."""
    return removal(
        path("v1", "projects", name),
        ask=f"delete project {name}?",
        yes=yes,
        said=f"deleted project {name}",
        record={"deleted": "project", "project": name},
    )

"""``httpbus project``: create, list, update and delete projects."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli import quota
from cli.common import (
    DEFAULT_URL,
    Limit,
    Offset,
    Output,
    Token,
    Url,
    Yes,
    changes,
    confirm,
    emit_json,
    paged_footer,
    run,
    table,
)
from control_plane.client import AdminClient, path

app = typer.Typer(help="Projects: create, list, update, delete; quotas.", no_args_is_help=True)
app.add_typer(quota.app, name="quota")
Name = Annotated[str, typer.Argument(help="Project name.")]


@app.command()
def create(
    name: Name,
    description: Annotated[str, typer.Option(help="What the project is for.")] = "",
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Create a project."""

    async def work(api: AdminClient) -> Any:
        return await api.post(path("v1", "projects"), {"name": name, "description": description})

    created = run(url, token, work)
    if output == "json":
        emit_json(created)
    else:
        typer.echo(f"created project {created['name']}")


@app.command("list")
def list_(
    offset: Offset = 0,
    limit: Limit = 100,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """List projects (a page at a time)."""

    async def work(api: AdminClient) -> Any:
        return await api.get(path("v1", "projects"), {"offset": offset, "limit": limit})

    page = run(url, token, work)
    if output == "json":
        emit_json(page)
        return
    rows = [(p["name"], p.get("description", ""), p.get("created_at", "")) for p in page["items"]]
    table("projects", ("name", "description", "created"), rows)
    paged_footer(page)


@app.command()
def update(
    name: Name,
    description: Annotated[str, typer.Option(help="What the project is for.")],
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Change a project's description.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile)."""
    project_path = path("v1", "projects", name)

    async def work(api: AdminClient) -> tuple[Any, Any]:
        current = await api.get(project_path)
        body = {"description": description, "version": current["version"]}
        return current, await api.put(project_path, body)

    before, after = run(url, token, work)
    if output == "json":
        emit_json(after)
        return
    done = changes({"description": before["description"]}, {"description": after["description"]})
    typer.echo(f"updated project {name}: {', '.join(done) or 'no change'}")


@app.command()
def delete(
    name: Name,
    yes: Yes = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Delete an empty project (asks first unless --yes).

    Refused (exit 4) while it has topics or subscriptions."""
    confirm(f"delete project {name}?", yes)

    async def work(api: AdminClient) -> None:
        await api.delete(path("v1", "projects", name))

    run(url, token, work)
    if output == "json":
        emit_json({"deleted": "project", "project": name})
    else:
        typer.echo(f"deleted project {name}")

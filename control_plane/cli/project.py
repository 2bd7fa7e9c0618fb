"""``httpbus project``: create and list projects."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ..client import AdminClient, path
from .common import (
    DEFAULT_URL,
    Limit,
    Offset,
    Output,
    Token,
    Url,
    emit_json,
    paged_footer,
    run,
    table,
)

app = typer.Typer(help="Projects: create, list.", no_args_is_help=True)


@app.command()
def create(
    name: Annotated[str, typer.Argument(help="Project name.")],
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

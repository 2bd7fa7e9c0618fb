"""``httpbus token``: the produce tokens of a project — create (the token is printed this
once), list, revoke."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.common import (
    DEFAULT_URL,
    Output,
    Project,
    Token,
    Url,
    Yes,
    confirm,
    emit_json,
    run,
    table,
)
from control_plane.client import AdminClient, path

app = typer.Typer(help="Produce tokens: create, list, revoke.", no_args_is_help=True)

TokenId = Annotated[str, typer.Argument(help="The token's id (12 hex digits, from `list`).")]


def _tokens(project: str, *rest: str) -> str:
    return path("v1", "projects", project, "tokens", *rest)


@app.command()
def create(
    project: Project,
    topics: Annotated[
        list[str] | None,
        typer.Option("--topic", help="A topic it may publish to (repeat); default: every topic."),
    ] = None,
    description: Annotated[str, typer.Option(help="Who or what uses it.")] = "",
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Make a produce token for some topics of a project.

    The token is printed this once: only its hash is kept."""
    body: dict[str, Any] = {"topics": topics or ["*"], "description": description}

    async def work(api: AdminClient) -> Any:
        return await api.post(_tokens(project), body)

    created = run(url, token, work)
    if output == "json":
        emit_json(created)
        return
    typer.echo(f"created token {created['id']} of {project} for {_scope(created['topics'])}")
    typer.echo(f"token (shown this once): {created['token']}")


def _scope(topics: list[str]) -> str:
    return "every topic" if "*" in topics else "topics " + ", ".join(topics)


@app.command("list")
def list_(
    project: Project, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """List a project's produce tokens (never the tokens themselves)."""

    async def work(api: AdminClient) -> Any:
        return await api.get(_tokens(project))

    found = run(url, token, work)
    if output == "json":
        emit_json(found)
        return
    rows = [(t["id"], _scope(t["topics"]), t.get("description", "")) for t in found]
    table(f"produce tokens of {project}", ("id", "may publish to", "description"), rows)
    typer.echo(f"{len(found)} token(s)")


@app.command()
def revoke(
    project: Project,
    token_id: TokenId,
    yes: Yes = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Revoke a produce token (asks first unless --yes).

    The producers refuse it once they see it gone (one metastore watch, usually within a
    second)."""
    confirm(f"revoke token {token_id} of {project}?", yes)

    async def work(api: AdminClient) -> None:
        await api.delete(_tokens(project, token_id))

    run(url, token, work)
    if output == "json":
        emit_json({"revoked": token_id, "project": project})
    else:
        typer.echo(f"revoked token {token_id} of {project}")

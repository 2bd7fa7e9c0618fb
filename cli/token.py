"""``httpbus token``: the produce tokens of a project — create (the token is printed this
once), list, revoke."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.kit import (
    Call,
    Columns,
    Output,
    Paging,
    Project,
    Yes,
    command,
    listing,
    post,
    removal,
    shown_once,
)
from control_plane.client import path

app = typer.Typer(help="Produce tokens: create, list, revoke.", no_args_is_help=True)

TokenId = Annotated[str, typer.Argument(help="The token's id (12 hex digits, from `list`).")]


def _tokens(project: str, *rest: str) -> str:
    return path("v1", "projects", project, "tokens", *rest)


def _scope(topics: list[str]) -> str:
    return "every topic" if "*" in topics else "topics " + ", ".join(topics)


@command(app)
def create(
    project: Project,
    topics: Annotated[
        list[str] | None,
        typer.Option("--topic", help="A topic it may publish to (repeat); default: every topic."),
    ] = None,
    description: Annotated[str, typer.Option(help="Who or what uses it.")] = "",
) -> Call:
    """Make a produce token for some topics of a project.

    The token is printed this once: only its hash is kept."""
    body: dict[str, Any] = {"topics": topics or ["*"], "description": description}
    return post(
        _tokens(project),
        body,
        text=lambda t: shown_once(f"token {t['id']} of {project} for {_scope(t['topics'])}", t),
    )


@command(app, "list")
def list_(project: Project, page: Paging, output: Output = "text") -> Call:
    """List a project's produce tokens (never the tokens themselves): a page by id (the
    next page's command is printed under it), or every page with --all; --search finds
    them by id, topic or description."""
    columns = Columns(
        f"produce tokens of {project}",
        ("id", "may publish to", "description"),
        lambda t: (t["id"], _scope(t["topics"]), t.get("description", "")),
    )
    again = f"httpbus token list {project}"
    where = _tokens(project)
    return listing(where, columns, page=page, counted="token", again=again, output=output)


@command(app)
def revoke(project: Project, token_id: TokenId, yes: Yes = False) -> Call:
    """Revoke a produce token (asks first unless --yes).

    The producers refuse it once they see it gone (one metastore watch, usually within a
    second)."""
    return removal(
        _tokens(project, token_id),
        ask=f"revoke token {token_id} of {project}?",
        yes=yes,
        said=f"revoked token {token_id} of {project}",
        record={"revoked": token_id, "project": project},
    )

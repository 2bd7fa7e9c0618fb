"""``httpbus topic grant``: let another project's subscriptions read a topic (add), list the
projects it is granted to, take a grant back (remove).

A subscription of project A to a topic of project B is made only if B's owner granted the
topic to A; removing the grant stops new subscriptions, the ones made under it stay::

    httpbus topic grant add shop orders billing      # billing may subscribe to shop/orders
    httpbus topic grant list shop orders
    httpbus topic grant remove shop orders billing --yes
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import typer

from cli.kit import (
    Call,
    Columns,
    Output,
    Paging,
    Project,
    Topic,
    Yes,
    command,
    listing,
    post,
    removal,
)
from control_plane.client import path

app = typer.Typer(
    help="Grants of a topic to other projects' subscriptions: add, list, remove.",
    no_args_is_help=True,
)

Grantee = Annotated[str, typer.Argument(help="The project whose subscriptions may read it.")]


def _grants(project: str, topic: str, *rest: str) -> str:
    return path("v1", "projects", project, "topics", topic, "grants", *rest)


def _since(grant: dict[str, Any]) -> str:
    at = datetime.fromtimestamp(int(grant["created_at_ms"]) / 1000, UTC)
    return at.strftime("%Y-%m-%d %H:%M:%S")


@command(app)
def add(project: Project, topic: Topic, grantee: Grantee) -> Call:
    """Let subscriptions of project GRANTEE read the topic (idempotent)."""
    return post(
        _grants(project, topic),
        {"project": grantee},
        text=lambda g: f"granted {project}/{topic} to project {g['grantee']}",
    )


@command(app, "list")
def list_(project: Project, topic: Topic, page: Paging, output: Output = "text") -> Call:
    """List the projects the topic is granted to: a page (the next page's command is
    printed under it), or every page with --all; --search finds them by name."""
    columns = Columns(
        f"grants of {project}/{topic}",
        ("project", "granted at (UTC)"),
        lambda g: (g["grantee"], _since(g)),
    )
    again = f"httpbus topic grant list {project} {topic}"
    where = _grants(project, topic)
    return listing(where, columns, page=page, counted="grant", again=again, output=output)


@command(app)
def remove(project: Project, topic: Topic, grantee: Grantee, yes: Yes = False) -> Call:
    """Take the grant back (asks first unless --yes): no new subscription of GRANTEE to the
    topic; the existing ones stay until deleted."""
    return removal(
        _grants(project, topic, grantee),
        ask=f"take back the grant of {project}/{topic} to project {grantee}?",
        yes=yes,
        said=f"removed the grant of {project}/{topic} to project {grantee}",
        record={"removed": "grant", "project": project, "topic": topic, "grantee": grantee},
    )

"""``httpbus topic grant-request``: ask the owners of another project's topic for a grant
(``create``, as an owner of the project that would subscribe), and, as the topic's owner,
``list``, ``approve`` (which makes the grant) or ``refuse`` (docs/catalog.md)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import typer

from cli.kit import (
    Call,
    Columns,
    Output,
    Paging,
    Project,
    Topic,
    command,
    listing,
    post,
)
from control_plane.client import path

app = typer.Typer(
    help="Grant requests: ask for another project's topic; list, approve, refuse as its owner.",
    no_args_is_help=True,
)

Grantee = Annotated[str, typer.Argument(help="The requesting project.")]
Note = Annotated[str, typer.Option(help="A word for the requester.")]


def _requests(project: str, topic: str, *rest: str) -> str:
    return path("v1", "projects", project, "topics", topic, "grant-requests", *rest)


def _said(verb: str) -> Any:
    return lambda r: f"{verb} the request of {r['grantee']} for {r['project']}/{r['topic']}"


@command(app)
def create(
    project: Project,
    topic: Topic,
    as_project: Annotated[
        str, typer.Option("--project", help="Your project, whose subscriptions would read it.")
    ],
    reason: Annotated[str, typer.Option(help="Why, for the topic's owners.")] = "",
) -> Call:
    """Ask the owners of PROJECT to grant TOPIC to your project."""
    body = {"project": as_project, "reason": reason}
    return post(
        _requests(project, topic),
        body,
        text=lambda r: (
            f"asked the owners of {project} for {project}/{topic} as {r['grantee']} ({r['state']})"
        ),
    )


@command(app, "list")
def list_(
    project: Project,
    topic: Topic,
    state: Annotated[
        Literal["pending", "approved", "refused"] | None,
        typer.Option(help="Only requests in this state."),
    ] = None,
    *,
    page: Paging,
    output: Output = "text",
) -> Call:
    """List the grant requests of one of your topics: a page by requesting project (the
    next page's command is printed under it), or every page with --all; --search finds
    them by project, requester, reason or note."""
    columns = Columns(
        f"grant requests of {project}/{topic}",
        ("grantee", "state", "requested by", "at", "reason", "decided by", "note"),
        lambda r: (
            r["grantee"],
            r["state"],
            r["requested_by"],
            r["requested_at"],
            r["reason"],
            r.get("decided_by") or "",
            r["note"],
        ),
    )
    params = {"state": state} if state else None
    again = f"httpbus topic grant-request list {project} {topic}"
    again += f" --state {state}" if state else ""
    return listing(
        _requests(project, topic),
        columns,
        page=page,
        params=params,
        counted="request",
        again=again,
        output=output,
    )


@command(app)
def approve(project: Project, topic: Topic, grantee: Grantee, note: Note = "") -> Call:
    """Approve a pending request: the topic is granted to the requesting project."""
    body = {"note": note}
    return post(_requests(project, topic, grantee, "approve"), body, text=_said("approved"))


@command(app)
def refuse(project: Project, topic: Topic, grantee: Grantee, note: Note = "") -> Call:
    """Refuse a pending request (it may be made again)."""
    body = {"note": note}
    return post(_requests(project, topic, grantee, "refuse"), body, text=_said("refused"))

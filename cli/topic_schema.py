"""``httpbus topic schema``: set a topic's JSON Schema (a new version, checked for
compatibility), get it (the latest or ``--version N``), list its versions, delete it.

    httpbus topic schema set shop orders order.schema.json --compatibility backward
    httpbus topic schema get shop orders --version 2 -o json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from cli.kit import EXIT_USAGE, Call, Project, Topic, Yes, command, fail, get, put, removal, table
from control_plane.client import path

app = typer.Typer(
    help="A topic's JSON Schema: set (a new version), get, versions, delete.",
    no_args_is_help=True,
)

MODES = ("backward", "forward", "full", "none")


def _where(project: str, topic: str, *rest: str) -> str:
    return path("v1", "projects", project, "topics", topic, "schema", *rest)


def _read(source: str) -> dict[str, Any]:
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
        document = json.loads(text)
    except (OSError, ValueError) as exc:
        raise fail(f"cannot read a JSON schema from {source}: {exc}", EXIT_USAGE) from None
    if not isinstance(document, dict):
        raise fail(f"{source} holds no JSON object (a schema is one)", EXIT_USAGE)
    return document


@command(app, "set")
def set_(
    project: Project,
    topic: Topic,
    source: Annotated[str, typer.Argument(help="A JSON Schema file (2020-12), or - for stdin.")],
    compatibility: Annotated[
        str | None,
        typer.Option(help="backward, forward, full or none (default: the topic's mode)."),
    ] = None,
) -> Call:
    """Add a schema version; refused (exit 4) if it breaks the compatibility mode."""
    if compatibility is not None and compatibility not in MODES:
        raise fail(f"--compatibility must be one of {', '.join(MODES)}", EXIT_USAGE)
    body: dict[str, Any] = {"schema": _read(source)}
    if compatibility is not None:
        body["compatibility"] = compatibility
    return put(
        _where(project, topic),
        body,
        text=lambda v: f"{project}/{topic} schema {_version(v)})",
    )


def _version(found: dict[str, Any]) -> str:
    return f"version {found['version']} (compatibility {found['compatibility']}"


@command(app, "get")
def get_(
    project: Project,
    topic: Topic,
    version: Annotated[int | None, typer.Option(min=1, help="A version (default: latest).")] = None,
) -> Call:
    """Show the schema in force, or one version of it."""
    at = () if version is None else ("versions", str(version))

    def shown(found: dict[str, Any]) -> str:
        typer.echo(f"{project}/{topic} schema {_version(found)}, {found['created_at']})")
        return json.dumps(found["schema"], indent=2)

    return get(_where(project, topic, *at), text=shown)


@command(app)
def versions(project: Project, topic: Topic) -> Call:
    """List the schema's versions, and whether it is in force."""

    def shown(found: dict[str, Any]) -> None:
        rows = [
            (
                n,
                "latest" + ("" if found["active"] else " (removed)")
                if n == found["latest"]
                else "",
            )
            for n in found["versions"]
        ]
        table(f"{project}/{topic} schema ({found['compatibility']})", ("version", "state"), rows)

    return get(_where(project, topic, "versions"), text=shown)


@command(app, output=False)
def delete(project: Project, topic: Topic, yes: Yes = False) -> Call:
    """Stop validating the topic's payloads (the versions stay readable)."""
    return removal(
        _where(project, topic),
        ask=f"stop validating {project}/{topic} against its schema?",
        yes=yes,
        said=f"{project}/{topic} no longer validates payloads",
    )

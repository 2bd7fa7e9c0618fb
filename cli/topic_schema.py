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

from cli.common import (
    DEFAULT_URL,
    EXIT_USAGE,
    Output,
    Project,
    Token,
    Topic,
    Url,
    Yes,
    confirm,
    emit_json,
    fail,
    run,
    table,
)
from control_plane.client import AdminClient, path

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


@app.command("set")
def set_(
    project: Project,
    topic: Topic,
    source: Annotated[str, typer.Argument(help="A JSON Schema file (2020-12), or - for stdin.")],
    compatibility: Annotated[
        str | None,
        typer.Option(help="backward, forward, full or none (default: the topic's mode)."),
    ] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Add a schema version; refused (exit 4) if it breaks the compatibility mode."""
    if compatibility is not None and compatibility not in MODES:
        raise fail(f"--compatibility must be one of {', '.join(MODES)}", EXIT_USAGE)
    body: dict[str, Any] = {"schema": _read(source)}
    if compatibility is not None:
        body["compatibility"] = compatibility

    async def work(api: AdminClient) -> Any:
        return await api.put(_where(project, topic), body)

    version = run(url, token, work)
    if output == "json":
        emit_json(version)
    else:
        typer.echo(
            f"{project}/{topic} schema version {version['version']} "
            f"(compatibility {version['compatibility']})"
        )


@app.command()
def get(
    project: Project,
    topic: Topic,
    version: Annotated[int | None, typer.Option(min=1, help="A version (default: latest).")] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Show the schema in force, or one version of it."""
    where = (
        _where(project, topic)
        if version is None
        else _where(project, topic, "versions", str(version))
    )

    async def work(api: AdminClient) -> Any:
        return await api.get(where)

    found = run(url, token, work)
    if output == "json":
        emit_json(found)
        return
    typer.echo(
        f"{project}/{topic} schema version {found['version']} "
        f"(compatibility {found['compatibility']}, {found['created_at']})"
    )
    typer.echo(json.dumps(found["schema"], indent=2))


@app.command()
def versions(
    project: Project,
    topic: Topic,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """List the schema's versions, and whether it is in force."""

    async def work(api: AdminClient) -> Any:
        return await api.get(_where(project, topic, "versions"))

    found = run(url, token, work)
    if output == "json":
        emit_json(found)
        return
    rows = [
        (n, "latest" + ("" if found["active"] else " (removed)") if n == found["latest"] else "")
        for n in found["versions"]
    ]
    table(
        f"{project}/{topic} schema ({found['compatibility']})",
        ("version", "state"),
        rows,
    )


@app.command()
def delete(
    project: Project,
    topic: Topic,
    yes: Yes = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Stop validating the topic's payloads (the versions stay readable)."""
    confirm(f"stop validating {project}/{topic} against its schema?", yes)

    async def work(api: AdminClient) -> Any:
        return await api.delete(_where(project, topic))

    run(url, token, work)
    typer.echo(f"{project}/{topic} no longer validates payloads")

"""The ``httpbus`` command line: ``dev`` runs the platform, the rest talk to its REST APIs.

Exit codes: see :mod:`cli.common`."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import (
    audit,
    db,
    dev,
    dlq,
    export,
    produce,
    project,
    run,
    sub,
    tail,
    token,
    topic,
    trace,
    user,
)
from cli.common import EXIT_CODES_HELP
from core.version import VERSION

cli = typer.Typer(
    help=f"httpbus: an HTTP asynchronous message bus. {EXIT_CODES_HELP}", no_args_is_help=True
)
cli.command()(dev.dev)
cli.command()(run.run)
cli.command()(produce.produce)
cli.add_typer(project.app, name="project")
cli.add_typer(topic.app, name="topic")
cli.add_typer(sub.app, name="sub")
cli.add_typer(token.app, name="token")
cli.add_typer(user.app, name="user")
cli.add_typer(dlq.app, name="dlq")
cli.command()(tail.tail)
cli.command()(trace.trace)
cli.add_typer(audit.app, name="audit")
cli.command()(export.export)
cli.add_typer(db.app, name="db")


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(VERSION)
        raise typer.Exit()


def main() -> None:
    cli()

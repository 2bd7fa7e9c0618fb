"""The ``httpbus`` command line: ``dev`` runs the platform, the rest talk to its REST APIs."""

from __future__ import annotations

from typing import Annotated

import typer

from httpbus import __version__

from . import audit, db, dev, produce

cli = typer.Typer(help="httpbus: an HTTP asynchronous message bus.", no_args_is_help=True)
cli.command()(dev.dev)
cli.command()(produce.produce)
cli.add_typer(audit.app, name="audit")
cli.add_typer(db.app, name="db")


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


def main() -> None:
    cli()

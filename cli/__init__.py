"""The ``httpbus`` command line.

Three kinds of module, kept apart so that most of the CLI is a plain client of the REST API:

- **API clients** — ``project``, ``quota``, ``topic``, ``topic_schema``, ``cutover``,
  ``failover``, ``migration`` (start, status, abandon), ``sub``, ``token``, ``user``, ``dlq``,
  ``trace``, ``tail``: declared with the command kit (:mod:`cli.kit`) and talking to the
  control plane through :mod:`control_plane.client` only. ``produce`` is a client of the
  producer service's HTTP API.
- **Local jobs** — ``audit`` (run, job, load), ``export``, ``migration_check`` (``topic
  migration check``) and ``db``: they read the settings file and work on the metastore, the
  storage clusters and the report database themselves (:mod:`cli.local`); ``audit``,
  ``export`` and the migration check run Spark, which they import only inside the command
  and ask for with exit 5 when it is missing (the ``httpbus[spark]`` extra).
- **Service starters** — ``dev`` and ``run`` (with ``supervisor``): they import the
  services' entry points to start them.

Exit codes: see :mod:`cli.kit`."""

from __future__ import annotations

from typing import Annotated

import typer

from cli import (
    audit,
    db,
    dev,
    dlq,
    export,
    migration,
    migration_check,
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
from cli.kit import EXIT_CODES_HELP, command
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
command(cli)(tail.tail)
command(cli)(trace.trace)
cli.add_typer(audit.app, name="audit")
cli.command()(export.export)
cli.add_typer(db.app, name="db")
migration.app.command()(migration_check.check)


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(VERSION)
        raise typer.Exit()


def main() -> None:
    cli()

"""The ``httpbus`` command line.

Three kinds of module, kept apart so that most of the CLI is a plain client of the REST API:

- **API clients** — ``catalog``, ``project``, ``quota``, ``topic``, ``topic_schema``,
  ``grant_request``, ``topic_grant``, ``topic_archive``, ``sub_replay``,
  ``cutover``, ``failover``,
  ``migration`` (start, status, abandon), ``sub``, ``signing_keys``, ``token``, ``user``,
  ``dlq``, ``trace``, ``tail``, ``overview``, ``audit_reports``
  (``audit runs|show|hourly|cutovers``): declared with the command kit (:mod:`cli.kit`) and
  talking to the control plane through :mod:`control_plane.client` only. ``produce`` is a
  client of the producer service's HTTP API.
- **Local jobs** — ``audit`` (run, job, load), ``export``, ``migration_check`` (``topic
  migration check``) and ``db``: they read the settings file and work on the metastore, the
  storage clusters and the report database themselves (:mod:`cli.local`); ``audit``,
  ``export`` and the migration check run Spark, which they import only inside the command
  and ask for with exit 5 when it is missing (the ``httpbus[spark]`` extra).
- **Service starters** — ``dev`` and ``run`` (with ``supervisor``): they import the
  services' entry points to start them; ``outbox`` (``outbox run``) starts the outbox relay
  (the ``httpbus[outbox]`` extra, exit 5 without it).

The root imports none of them: each is loaded when its command runs (or for ``--help``), so
``httpbus --version`` answers without importing httpx, pydantic, FastAPI or Spark
(:mod:`cli.lazy`). A new command is one line of ``COMMANDS`` below, in the order ``--help``
lists it.

Exit codes: see :mod:`cli.kit`."""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from cli.lazy import Kind, Lazy, lazy_group
from core.version import VERSION

# The exit codes of cli.kit, in a sentence for --help (here, not in the kit: importing the
# kit imports the API client, which --version must not wait for).
EXIT_CODES_HELP = (
    "Exit codes: 0 done, 1 refused by the API or not confirmed, 2 bad usage (a delete off a "
    "terminal needs --yes), 3 not found, 4 conflict or in use, 5 not available on this "
    "control plane (or Spark not installed), 6 control plane unreachable or failing, "
    "7 operation ended unsuccessfully."
)


def _dev() -> Any:
    from cli import dev

    return dev.dev


def _run() -> Any:
    from cli import run

    return run.run


def _produce() -> Any:
    from cli import produce

    return produce.produce


def _tail() -> Any:
    from cli import tail

    return tail.tail


def _overview() -> Any:
    from cli import overview

    return overview.overview


def _search() -> Any:
    from cli import overview

    return overview.search


def _trace() -> Any:
    from cli import trace

    return trace.trace


def _whoami() -> Any:
    from cli import user

    return user.whoami


def _export() -> Any:
    from cli import export

    return export.export


def _catalog() -> Any:
    from cli import catalog

    return catalog.app


def _project() -> Any:
    from cli import project

    return project.app


def _topic() -> Any:
    from cli import migration, migration_check, topic

    migration.app.command()(migration_check.check)  # ``topic migration check``
    return topic.app


def _sub() -> Any:
    from cli import sub

    return sub.app


def _signing_keys() -> Any:
    from cli import signing_keys

    return signing_keys.app


def _token() -> Any:
    from cli import token

    return token.app


def _user() -> Any:
    from cli import user

    return user.app


def _dlq() -> Any:
    from cli import dlq

    return dlq.app


def _audit() -> Any:
    from cli import audit, audit_reports

    audit_reports.register(audit.app)  # ``audit runs|show|hourly|cutovers``
    return audit.app


def _db() -> Any:
    from cli import db

    return db.app


def _outbox() -> Any:
    from cli import outbox

    return outbox.app


# In the order --help lists them: the commands, then the groups.
COMMANDS = (
    Lazy("dev", Kind.COMMAND, _dev),
    Lazy("run", Kind.COMMAND, _run),
    Lazy("produce", Kind.COMMAND, _produce),
    Lazy("overview", Kind.KIT, _overview),
    Lazy("search", Kind.KIT, _search),
    Lazy("tail", Kind.KIT, _tail),
    Lazy("trace", Kind.KIT, _trace),
    Lazy("whoami", Kind.KIT, _whoami),
    Lazy("export", Kind.COMMAND, _export),
    Lazy("catalog", Kind.GROUP, _catalog),
    Lazy("project", Kind.GROUP, _project),
    Lazy("topic", Kind.GROUP, _topic),
    Lazy("sub", Kind.GROUP, _sub),
    Lazy("signing-keys", Kind.GROUP, _signing_keys),
    Lazy("token", Kind.GROUP, _token),
    Lazy("user", Kind.GROUP, _user),
    Lazy("dlq", Kind.GROUP, _dlq),
    Lazy("audit", Kind.GROUP, _audit),
    Lazy("db", Kind.GROUP, _db),
    Lazy("outbox", Kind.GROUP, _outbox),
)

cli = typer.Typer(
    help=f"httpbus: an HTTP asynchronous message bus. {EXIT_CODES_HELP}",
    no_args_is_help=True,
    cls=lazy_group(COMMANDS),
)


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(VERSION)
        raise typer.Exit()


def main() -> None:
    # ``httpbus --version`` alone is answered before Typer builds the root group: building
    # it imports pydantic (Typer coerces every option through a TypeAdapter), half of what
    # is left of the start-up once the commands load lazily. Same output, same exit code.
    if sys.argv[1:] == ["--version"]:
        typer.echo(VERSION)
        return
    cli()

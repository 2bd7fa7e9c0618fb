"""The ``httpbus`` command line."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from httpbus import __version__
from httpbus.metastore.config import EmbeddedMetaStoreConfig
from httpbus.segments.config import EmbeddedClusterConfig

from .app import create_app
from .settings import ControlPlaneSettings

cli = typer.Typer(help="httpbus: an HTTP asynchronous message bus.", no_args_is_help=True)

ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        envvar="HTTPBUS_CONFIG",
        help="YAML or TOML settings file.",
        exists=True,
        dir_okay=False,
    ),
]


@cli.callback(invoke_without_command=True)
def _root(
    version: Annotated[bool, typer.Option("--version", help="Print the version and exit.")] = False,
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


def dev_settings(config: Path | None, data_dir: Path, host: str, port: int) -> ControlPlaneSettings:
    """Settings of ``httpbus dev``: the embedded metastore and store in ``data_dir``, and an
    admin token from the environment or made up for this run."""
    data_dir.mkdir(parents=True, exist_ok=True)
    base = ControlPlaneSettings.load(config)
    overrides: dict[str, object] = {"host": host, "port": port}
    if config is None:
        overrides["metastore"] = EmbeddedMetaStoreConfig(path=str(data_dir / "metastore.db"))
        overrides["clusters"] = {
            "embedded": EmbeddedClusterConfig(path=str(data_dir / "segments.db"))
        }
        overrides["default_cluster"] = "embedded"
    if base.admin_token is None:
        overrides["admin_token"] = secrets.token_urlsafe(24)
    return ControlPlaneSettings.load(config, **overrides)


@cli.command()
def dev(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Control-plane port.")] = 8700,
    data_dir: Annotated[Path, typer.Option(help="Where the embedded stores live.")] = Path(
        ".httpbus"
    ),
    config: ConfigOption = None,
) -> None:
    """Run the platform on this machine on the embedded backends."""
    settings = dev_settings(config, data_dir, host, port)
    assert settings.admin_token is not None
    token = settings.admin_token.get_secret_value()
    typer.echo(f"httpbus dev {__version__}")
    typer.echo(f"  control plane  http://{host}:{port}   (API docs: /docs)")
    typer.echo(f"  admin token    {token}")
    typer.echo(f"  data           {data_dir.resolve()}")
    typer.echo(f"  try: curl -H 'Authorization: Bearer {token}' http://{host}:{port}/v1/projects")
    uvicorn.run(create_app(settings), host=host, port=port, log_level="info")


def main() -> None:
    cli()

"""The ``httpbus`` command line."""

from __future__ import annotations

import typer
import uvicorn

from httpbus import __version__

from .app import create_app

cli = typer.Typer(help="httpbus: an HTTP asynchronous message bus.", no_args_is_help=True)


@cli.callback(invoke_without_command=True)
def _root(
    version: bool = typer.Option(False, "--version", help="Print the version and exit."),
) -> None:
    if version:
        typer.echo(__version__)
        raise typer.Exit()


@cli.command()
def dev(
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8700, help="Control-plane port."),
) -> None:
    """Run the platform on this machine on the embedded backends."""
    typer.echo(f"httpbus dev: control plane on http://{host}:{port} (GET /healthz)")
    uvicorn.run(create_app(), host=host, port=port, log_level="info")


def main() -> None:
    cli()

"""``httpbus run --config FILE``: the three services on this machine from one deployment
file (docs/configuration.md): the control plane in this process, the producer and one
worker as child processes reading the same file, each restarted if it dies. For a machine
of your own with real ZooKeeper, Kafka and Pulsar (``make run-real`` writes the file for
``make services-up``'s servers); in production run each service under its own unit
(deploy/systemd/, docs/running.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from cli.dev import start_service
from cli.kit import config_file
from cli.supervisor import Supervisor
from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.http_server import uvicorn_options
from core.settings import SECTIONS, read_config
from core.version import VERSION


def run(
    config: Annotated[
        Path,
        config_file("The deployment file (with control_plane, producer and worker sections)."),
    ],
) -> None:
    """Run the control plane, a producer and a worker from one deployment file."""
    if not any(section in read_config(config) for section in SECTIONS):
        raise typer.BadParameter(
            f"{config} has no control_plane, producer or worker section: it is one service's "
            "file (see docs/configuration.md, One file for a deployment)",
            param_hint="--config",
        )
    settings = ControlPlaneSettings.load(config)
    typer.echo(f"httpbus run {VERSION} from {config}")
    typer.echo(f"  control plane  http://{settings.host}:{settings.port}   (API docs: /docs)")
    children = {
        "producer": lambda: start_service("producer_api", config),
        "worker": lambda: start_service("delivery_workers", config),
    }
    with Supervisor(children) as supervised:  # a child that dies is restarted
        app = create_app(settings)
        app.state.children_down = supervised.down  # /readyz: 503 while one is down
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level="info",
            **uvicorn_options(settings.http_server),
        )

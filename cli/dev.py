"""``httpbus dev``: the whole platform on this machine, on the embedded backends."""

from __future__ import annotations

import ctypes
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer
import uvicorn
import yaml

from cli.kit import ConfigOption
from cli.supervisor import Supervisor
from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core.endpoint_policy import EndpointPolicy
from core.http_server import uvicorn_options
from core.version import VERSION
from metastore.config import EmbeddedMetaStoreConfig
from segments.config import EmbeddedClusterConfig


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
    if "database_url" not in base.model_fields_set:  # not set by the file or HTTPBUS_DATABASE_URL
        overrides["database_url"] = f"sqlite:///{(data_dir / 'reports.db').absolute()}"
    if base.admin_token is None:
        overrides["admin_token"] = secrets.token_urlsafe(24)
    if "endpoint_policy" not in base.model_fields_set:  # endpoints on this machine: allowed
        overrides["endpoint_policy"] = EndpointPolicy(allow_private_networks=True)
    return ControlPlaneSettings.load(config, **overrides)


def dev(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Control-plane port.")] = 8700,
    producer_port: Annotated[int, typer.Option(help="Producer port.")] = 8701,
    worker_port: Annotated[int, typer.Option(help="Worker health/metrics port.")] = 8702,
    data_dir: Annotated[Path, typer.Option(help="Where the embedded stores live.")] = Path(
        ".httpbus"
    ),
    config: ConfigOption = None,
) -> None:
    """Run the platform on this machine on the embedded backends."""
    settings = dev_settings(config, data_dir, host, port)
    assert settings.admin_token is not None
    token = settings.admin_token.get_secret_value()
    typer.echo(f"httpbus dev {VERSION}")
    typer.echo(f"  control plane  http://{host}:{port}   (API docs: /docs)")
    typer.echo(f"  admin token    {token}")
    typer.echo(f"  data           {data_dir.resolve()}")
    typer.echo(f"  try: curl -H 'Authorization: Bearer {token}' http://{host}:{port}/v1/projects")
    typer.echo(f"  producer       http://{host}:{producer_port}")
    typer.echo(f"  worker         http://{host}:{worker_port}/metrics")
    starts = {
        "producer": lambda: _start_producer(settings, data_dir, host, producer_port, token),
        "worker": lambda: _start_worker(settings, data_dir, host, worker_port),
    }
    with Supervisor(starts) as children:  # a child that dies is restarted
        app = create_app(settings)
        app.state.children_down = children.down  # /readyz: 503 while one is down
        uvicorn.run(
            app, host=host, port=port, log_level="info", **uvicorn_options(settings.http_server)
        )


def _start_producer(
    settings: ControlPlaneSettings, data_dir: Path, host: str, port: int, token: str
) -> subprocess.Popen[bytes]:
    """The producer service as a child process on the same embedded stores (deployables
    never import each other: each runs as its own process, as in production)."""
    config = _child_config(settings, data_dir / "producer.yaml", host, port)
    return start_service("producer_api", config, {**os.environ, "HTTPBUS_ADMIN_TOKEN": token})


def _start_worker(
    settings: ControlPlaneSettings, data_dir: Path, host: str, port: int
) -> subprocess.Popen[bytes]:
    """One delivery worker as a child process on the same embedded stores."""
    policy = settings.endpoint_policy.model_dump(mode="json")
    config = _child_config(settings, data_dir / "worker.yaml", host, port, endpoint_policy=policy)
    return start_service("delivery_workers", config)


def _child_config(
    settings: ControlPlaneSettings, config: Path, host: str, port: int, **more: object
) -> Path:
    """Write a child's settings file: its address, and the stores of ``settings``."""
    shared = {
        "host": host,
        "port": port,
        "metastore": settings.metastore.model_dump(),
        "clusters": {n: c.model_dump() for n, c in settings.clusters.items()},
        "audit": {"cluster": settings.default_cluster},
        "http_server": settings.http_server.model_dump(),
    }
    config.write_text(yaml.safe_dump({**shared, **more}))
    return config


def start_service(
    module: str, config: Path, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``python -m module --config config`` as a child that ends with this process."""
    return subprocess.Popen(
        [sys.executable, "-m", module, "--config", str(config)],
        env=env,
        preexec_fn=end_with_parent,
    )


def end_with_parent() -> None:
    """Runs in the child before exec: the kernel sends it SIGTERM when ``httpbus dev`` dies.
    uvicorn re-raises the SIGTERM it handled, so ``dev`` may end without its ``finally``."""
    if sys.platform == "linux":
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

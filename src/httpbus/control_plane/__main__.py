"""``python -m httpbus.control_plane [--config FILE] [--host H] [--port P]``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import uvicorn

from .app import create_app
from .settings import ControlPlaneSettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m httpbus.control_plane", description="The httpbus control plane."
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=os.environ.get("HTTPBUS_CONFIG"),
        help="YAML or TOML settings file (default: $HTTPBUS_CONFIG)",
    )
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args = parser.parse_args(argv)
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = ControlPlaneSettings.load(args.config, **overrides)
    uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level="warning")


if __name__ == "__main__":
    main()

"""``python -m httpbus.delivery_workers [--config FILE] [--host H] [--port P]``."""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path

import uvicorn

from .app import create_app
from .settings import WorkerSettings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m httpbus.delivery_workers", description="The httpbus delivery worker."
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
    settings = WorkerSettings.load(args.config, **overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()

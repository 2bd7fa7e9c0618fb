"""``python -m delivery_workers [--config FILE] [--host H] [--port P] [--processes N|auto]``."""

from __future__ import annotations

import logging

from core import collector, gil
from core.http_server import uvicorn_options
from core.prefork import serve_service
from core.settings import service_args

from .app import create_app
from .settings import WorkerSettings


def main(argv: list[str] | None = None) -> None:
    config, overrides = service_args(
        "python -m delivery_workers", "The httpbus delivery worker.", argv, processes=True
    )
    settings = WorkerSettings.load(config, **overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per request otherwise
    collector.tune()  # 40 % of an idle worker's CPU at 2 000 subscriptions was the collector's
    gil.tune()  # its ZooKeeper answers waited for a busy loop's GIL (core/gil.py)
    options = {
        "loop": "uvloop",
        "log_level": "warning",
        "access_log": False,
        **uvicorn_options(settings.http_server),
    }
    serve_service(create_app, settings, options)


if __name__ == "__main__":
    main()

"""``python -m delivery_workers [--config FILE] [--host H] [--port P]``."""

from __future__ import annotations

import logging

import uvicorn

from core.http_server import uvicorn_options
from core.settings import service_args

from .app import create_app
from .settings import WorkerSettings


def main(argv: list[str] | None = None) -> None:
    config, overrides = service_args(
        "python -m delivery_workers", "The httpbus delivery worker.", argv
    )
    settings = WorkerSettings.load(config, **overrides)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        log_level="warning",
        access_log=False,
        **uvicorn_options(settings.http_server),
    )


if __name__ == "__main__":
    main()

"""``python -m control_plane [--config FILE] [--host H] [--port P]``."""

from __future__ import annotations

import uvicorn

from control_plane.app import create_app
from control_plane.settings import ControlPlaneSettings
from core import collector, gil
from core.http_server import uvicorn_options
from core.settings import service_args


def main(argv: list[str] | None = None) -> None:
    config, overrides = service_args("python -m control_plane", "The httpbus control plane.", argv)
    settings = ControlPlaneSettings.load(config, **overrides)
    app = create_app(settings)
    collector.tune()  # its full collections (110-250 ms at 10^4 subscriptions) held the pages
    gil.tune()  # its leaders' ZooKeeper answers waited for a busy loop's GIL (core/gil.py)
    uvicorn.run(
        app,
        host=settings.host,
        port=settings.port,
        log_level="warning",
        **uvicorn_options(settings.http_server),
    )


if __name__ == "__main__":
    main()

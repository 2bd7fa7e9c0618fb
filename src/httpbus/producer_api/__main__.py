"""``python -m httpbus.producer_api [--config FILE] [--host H] [--port P]``."""

from __future__ import annotations

import uvicorn

from httpbus.core.settings import service_args

from .app import create_app
from .settings import ProducerSettings


def main(argv: list[str] | None = None) -> None:
    config, overrides = service_args(
        "python -m httpbus.producer_api", "The httpbus producer service.", argv
    )
    settings = ProducerSettings.load(config, **overrides)
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        http="httptools",
        log_level="warning",
        access_log=False,
        # The service does not use the client's address: no per-request X-Forwarded-* work.
        proxy_headers=False,
    )


if __name__ == "__main__":
    main()

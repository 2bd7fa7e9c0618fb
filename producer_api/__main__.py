"""``python -m producer_api [--config FILE] [--host H] [--port P] [--processes N|auto]``."""

from __future__ import annotations

import gc

from core.http_server import uvicorn_options
from core.prefork import serve_service
from core.settings import service_args

from .app import create_app
from .settings import ProducerSettings


def main(argv: list[str] | None = None) -> None:
    config, overrides = service_args(
        "python -m producer_api", "The httpbus producer service.", argv, processes=True
    )
    settings = ProducerSettings.load(config, **overrides)
    # A batch makes a dozen short-lived objects per message, so the default GC ran a young
    # collection every few hundred messages and full ones over every module and class:
    # a quarter of the batch path's CPU (measured). Startup objects are frozen out of the
    # collector and the young generation is collected less often; cycles still get collected.
    gc.freeze()
    gc.set_threshold(50_000, 50, 1_000)
    options = {
        "loop": "uvloop",
        "log_level": "warning",
        "access_log": False,
        # The service does not use the client's address: no per-request X-Forwarded-* work.
        "proxy_headers": False,
        # httptools, with a request-header size limit and header/body read timeouts.
        **uvicorn_options(settings.http_server),
    }
    serve_service(create_app, settings, options)


if __name__ == "__main__":
    main()

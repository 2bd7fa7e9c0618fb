"""``python -m producer_api [--config FILE] [--host H] [--port P] [--processes N|auto]``."""

from __future__ import annotations

from core import collector
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
    collector.tune()  # a quarter of a batch publish's CPU was the collector's
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

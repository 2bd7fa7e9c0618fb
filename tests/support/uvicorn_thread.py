"""An ASGI app served by uvicorn in a daemon thread on a free loopback port, for tests whose
client is synchronous or runs its own event loop.

    with uvicorn_thread(app, http="h11") as port:
        httpx.get(f"http://127.0.0.1:{port}/")
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from tests.support.until import until_sync


@contextmanager
def uvicorn_thread(app: Any, **options: Any) -> Iterator[int]:
    """``app`` served (no websockets, no lifespan, warnings only, ``options`` on top) until the
    block ends: its port."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        ws="none",
        lifespan="off",
        log_level="warning",
        timeout_graceful_shutdown=1,
        **options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    until_sync(
        lambda: server.started or not thread.is_alive(), 10, "uvicorn to start", interval=0.01
    )
    assert server.started, "uvicorn did not start"
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)

"""A uvicorn server with httpbus's client limits (:mod:`core.http_server`) on a free loopback
port, in a thread, and a raw socket client to misbehave against it.

    with guarded_server(HttpServerLimits(header_timeout_s=0.5)) as server:
        with server.connect() as sock:
            sock.sendall(b"GET / HTTP/1.1\\r\\n")
            assert read_all(sock, deadline_s=3).startswith(b"HTTP/1.1 408")
        assert server.app.calls == 0
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from core.http_server import HttpServerLimits, uvicorn_options
from tests.support.uvicorn_thread import uvicorn_thread


@dataclass
class CountingApp:
    """An ASGI app that reads the whole body and answers 200 ``ok``; counts its calls."""

    calls: int = 0
    bodies: list[bytes] = field(default_factory=list)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        self.calls += 1
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.bodies.append(body)
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})


@dataclass
class Served:
    app: CountingApp
    port: int

    def connect(self, timeout_s: float = 5.0) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=timeout_s)
        return sock


def read_all(sock: socket.socket, deadline_s: float) -> bytes:
    """Everything the server sends until it closes the connection; ``AssertionError`` if it
    is still open after ``deadline_s``. A reset after the answer ends the read too."""
    end = time.monotonic() + deadline_s
    got = b""
    while True:
        left = end - time.monotonic()
        assert left > 0, f"the server did not close within {deadline_s} s (got {got[:80]!r})"
        sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return got
        except TimeoutError:
            continue
        if not chunk:
            return got
        got += chunk


@contextmanager
def guarded_server(limits: HttpServerLimits, app: CountingApp | None = None) -> Iterator[Served]:
    app = app or CountingApp()
    with uvicorn_thread(app, **uvicorn_options(limits)) as port:
        yield Served(app, port)

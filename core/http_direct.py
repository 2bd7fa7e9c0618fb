"""Requests answered without ASGI: the hot routes of a service, inside the guarded protocol.

uvicorn's protocol builds, per request, an ASGI scope (with a copy of the app's state), an
``asyncio.Event``, a :class:`~uvicorn.protocols.http.httptools_impl.RequestResponseCycle`,
and validates each response header on ``send``: about half of what a bare 1 KiB POST costs
the server (``bench/README.md``, "A produce route without ASGI"). An application that
answers a few routes itself offers them through ``http_direct_route(method, path)``; the
guarded protocol (:mod:`core.http_server`) asks it once a request's headers are in and, for
a route it names, runs a :class:`DirectCycle` instead: the raw headers and a ``receive``
that yields the body as ASGI ``http.request`` / ``http.disconnect`` messages, and an
answer written in one piece. Everything else about the connection is unchanged: the
guards' limits and timers, pipelining (a direct cycle waits in uvicorn's queue like any
other), ``Expect: 100-continue``, keep-alive, HTTP/1.0 and the graceful shutdown.

Example::

    class App:
        def http_direct_route(self, method: bytes, path: bytes) -> DirectHandler | None:
            return self.produce if method == b"POST" and path == b"/produce" else None
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from typing import Any, Protocol, cast

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from .errors import HttpbusError

RawHeaders = list[tuple[bytes, bytes]]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Answer = tuple[int, RawHeaders, bytes]
DirectHandler = Callable[[RawHeaders, Receive], Awaitable[Answer]]
"""``(request headers, receive) -> (status, response headers, body)``; the server adds its
default headers (uvicorn's ``date`` and ``server``), ``content-length``, and ``connection:
close`` when the connection ends."""

log = logging.getLogger(__name__)

# A direct request's body is buffered up to this much before reading pauses until the
# handler takes it (uvicorn's own high-water mark).
HIGH_WATER = 64 * 1024
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


def error_answer(error: HttpbusError) -> bytes:
    """A whole answer to ``error`` (its JSON body, a stable code) that closes the connection:
    the guards' refusals, and a direct handler's failure."""
    body = json.dumps(error.to_body()).encode()
    head = (
        f"HTTP/1.1 {error.code.status} {error.code.code.replace('_', ' ')}\r\n"
        "content-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


_FAILED = error_answer(
    HttpbusError("the server failed on this request (it is logged); send it again")
)


class DirectRouter(Protocol):
    """What an application offers to have some routes answered without ASGI."""

    def http_direct_route(self, method: bytes, path: bytes) -> DirectHandler | None: ...


def router_of(app: object) -> Callable[[bytes, bytes], DirectHandler | None] | None:
    """The application's ``http_direct_route``, if it has one, also behind uvicorn's own
    wrappers (``ProxyHeadersMiddleware``: a direct route does not read the client's
    address)."""
    for _ in range(4):
        if getattr(type(app), "http_direct_route", None) is not None:
            return cast(DirectRouter, app).http_direct_route
        if not type(app).__module__.startswith("uvicorn.middleware."):
            return None
        app = getattr(app, "app", None)
    return None


def request_path(url: bytes) -> bytes | None:
    """The path of a request target in origin form without escapes, else None (the request
    then goes through ASGI, which decodes what this does not)."""
    path = url.partition(b"?")[0]
    if not path.startswith(b"/") or b"%" in path:
        return None
    return path


def body_is_here(receive: Receive) -> bool:
    """Whether ``receive`` is a direct cycle's whose whole body has come: it answers at once,
    so waiting on it needs no time limit."""
    cycle = getattr(receive, "__self__", None)
    return type(cycle) is DirectCycle and not cycle.more_body


class Connection(Protocol):
    """The parts of the guarded protocol a direct cycle uses."""

    def resume_reading(self) -> None: ...

    def pause_reading(self) -> None: ...

    def write_answer(self, data: bytes, close: bool) -> None: ...

    def on_response_complete(self) -> None: ...

    def is_closing(self) -> bool: ...


class DirectCycle:
    """One request answered by a :data:`DirectHandler`. It has the attributes of uvicorn's
    ``RequestResponseCycle`` that the protocol and the server read or set (``disconnected``,
    ``keep_alive``, ``response_started``, ``response_complete``, ``message_event``), and
    ``run_asgi``, through which uvicorn starts a cycle, pipelined ones included."""

    __slots__ = (
        "_body",
        "_buffered",
        "_connection",
        "_default_headers",
        "_handler",
        "_headers",
        "_waiter",
        "disconnected",
        "keep_alive",
        "more_body",
        "response_complete",
        "response_started",
        "waiting_for_100_continue",
    )

    def __init__(
        self,
        connection: Connection,
        handler: DirectHandler,
        headers: RawHeaders,
        *,
        keep_alive: bool,
        expect_100_continue: bool,
        default_headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        self._connection = connection
        self._default_headers = default_headers
        self._handler = handler
        self._headers = headers
        self._body: list[bytes] = []
        self._buffered = 0
        self._waiter: asyncio.Future[None] | None = None
        self.disconnected = False
        self.keep_alive = keep_alive
        self.more_body = True
        self.response_started = False
        self.response_complete = False
        self.waiting_for_100_continue = expect_100_continue

    @property
    def message_event(self) -> DirectCycle:
        """uvicorn sets its cycle's event when the connection is lost: that wakes ``receive``."""
        return self

    def set(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def feed(self, chunk: bytes) -> None:
        """Part of the body, from the parser."""
        self._body.append(chunk)
        self._buffered += len(chunk)
        if self._buffered > HIGH_WATER:
            self._connection.pause_reading()
        self.set()

    def end(self) -> None:
        """The body is complete."""
        self.more_body = False
        self.set()

    async def receive(self) -> MutableMapping[str, Any]:
        """The body so far, as ASGI's ``http.request``; ``http.disconnect`` once the client
        is gone."""
        if self.waiting_for_100_continue and not self._connection.is_closing():
            self._connection.write_answer(_CONTINUE, close=False)
            self.waiting_for_100_continue = False
        while self.more_body and not self._body and not self.disconnected:
            self._connection.resume_reading()
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self.disconnected:
            return {"type": "http.disconnect"}
        body = self._body[0] if len(self._body) == 1 else b"".join(self._body)
        self._body.clear()
        self._buffered = 0
        self._connection.resume_reading()
        return {"type": "http.request", "body": body, "more_body": self.more_body}

    async def run_asgi(self, app: object) -> None:
        """Run the handler and write its answer (``app`` is unused: uvicorn's pipeline passes
        the application along with each cycle)."""
        try:
            status, headers, body = await self._handler(self._headers, self.receive)
        except Exception:
            log.exception("a direct route's handler failed")
            self._write(_FAILED, close=True)
            return
        answer = _encode(status, [*self._default_headers, *headers], body, self.keep_alive)
        self._write(answer, close=not self.keep_alive)

    def _write(self, data: bytes, *, close: bool) -> None:
        if self.disconnected or self.response_complete:
            return
        self.response_started = self.response_complete = True
        self._connection.write_answer(data, close)
        self._connection.on_response_complete()


def _encode(status: int, headers: RawHeaders, body: bytes, keep_alive: bool) -> bytes:
    parts = [STATUS_LINE[status]]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"content-length: %d\r\n" % len(body))
    if not keep_alive:
        parts.append(b"connection: close\r\n")
    parts += (b"\r\n", body)
    return b"".join(parts)

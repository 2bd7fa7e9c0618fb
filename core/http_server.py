"""The limits every httpbus HTTP server enforces on its clients, before any application code.

uvicorn (with httptools) buffers a request's header section without bound and waits for a
slow client for ever: a 64 MB header before authentication cost 64 MB of memory, and a
client sending a byte every few seconds held its connection open. :func:`uvicorn_options`
gives ``uvicorn.run`` / ``uvicorn.Config`` a protocol that, per connection:

- answers **431** (``headers_too_large``) and closes once the request line and headers pass
  ``max_header_bytes`` without ending (counted as they arrive, so at most one read beyond
  the limit is ever buffered);
- answers **408** (``request_timeout``) and closes when the header section has not ended
  ``header_timeout_s`` after the connection opened or the request's first byte came, or the
  body has not ended ``body_timeout_s`` after the headers did;
- closes a connection idle between requests after ``keep_alive_s`` (uvicorn's own timer);
- answers **400** (``malformed``) and closes, without calling the application, a request
  without a ``Host`` header in HTTP/1.1, or with more than one in any version (RFC 9112,
  3.2: a server must refuse both).

It lives in ``core`` because all three services serve HTTP and may not import each other;
it holds no state beyond the connection it guards. What a proxy in front must add is in
``docs/deploy.md``.

Example::

    uvicorn.run(app, host=host, port=port, **uvicorn_options(settings.http_server))
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, ClassVar, cast

import httptools
from pydantic import BaseModel, ConfigDict, Field
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .errors import HeadersTooLarge, HttpbusError, Malformed, RequestTimeout
from .http_direct import DirectCycle, error_answer, request_path, router_of
from .settings import seconds

# After a refusal the rest of what the client already sent is read and dropped, up to this
# much or for this long, so it reads the answer instead of a connection reset.
LINGER_BYTES = 1024 * 1024
LINGER_S = 1.0


class _Coalescing:
    """The connection's transport, writing a response's head and body in one ``send``.

    uvicorn writes the status line and headers, then the body, as two writes: two system
    calls and two TCP segments per response (uvloop sets ``TCP_NODELAY``), a fifth of the
    single-publish path's CPU in a profile. Here a write is held until the next one, which
    goes out with it, or until the end of the loop iteration, whichever comes first; order
    is kept and ``write_eof`` and ``close`` send what is held first. Everything else is the
    transport's."""

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + bytes(data))
        else:
            self._held = bytes(data)
            self._loop.call_soon(self._flush)

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def write_now(self, data: bytes) -> None:
        """Write what is held and ``data`` at once (a whole answer: nothing follows)."""
        held, self._held = self._held, None
        self._transport.write(data if held is None else held + data)

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class HttpServerLimits(BaseModel):
    """The HTTP server's limits on clients (settings ``http_server`` of every service)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=4 * 1024,
        le=16 * 1024 * 1024,
        description="request line and headers, in bytes; more is answered 431",
    )
    header_timeout_s: float = seconds(10.0, 600, "the most a request's headers may take (408)")
    body_timeout_s: float = seconds(60.0, 3600, "the most a request's body may take (408)")
    # Longer than clients keep an idle connection (httpx 5 s, aiohttp 15 s, load balancers
    # 60 s), so the client closes first: a server closing at the client's own expiry races
    # the client's next request on that connection, which fails unanswered (CI, twice).
    keep_alive_s: float = seconds(75.0, 600, "an idle keep-alive connection is closed after")
    forwarded_allow_ips: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="addresses or CIDRs of the proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed; none (the default): the TCP peer is the client",
    )


def _host_problem(headers: list[tuple[bytes, bytes]], version: str) -> Malformed | None:
    """Why a request's ``Host`` headers are refused, or None."""
    count = sum(1 for name, _ in headers if name == b"host")
    if count > 1 or (count == 0 and version != "1.0"):
        return Malformed(
            f"a request carries exactly one Host header (HTTP/1.1); this one has {count}"
        )
    return None


_PARSER_HINTS = (
    (
        "header value",
        "a header value holds control characters (CR, LF, NUL or another below 0x20, "
        "or DEL): send printable text",
    ),
    ("header token", "a header name is not an HTTP token (letters, digits, !#$%&'*+-.^_`|~)"),
)


def _not_http(exc: Exception) -> Malformed:
    """What a request the HTTP parser refused is told (uvicorn says only "Invalid HTTP
    request received.", in plain text)."""
    said = str(exc) or type(exc).__name__
    for part, hint in _PARSER_HINTS:
        if part in said.lower():
            return Malformed(f"the request is not valid HTTP/1.1 ({said}): {hint}")
    return Malformed(f"the request is not valid HTTP/1.1 ({said}); nothing of it was read")


def _refusing_app(error: HttpbusError) -> Any:
    """An ASGI app that reads what the client sends (up to :data:`LINGER_BYTES`, so it reads
    the answer instead of a reset) and answers ``error``, closing the connection."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        taken, more = 0, True
        while more and taken <= LINGER_BYTES:
            message = await receive()
            taken += len(message.get("body", b""))
            more = message.get("more_body", False) and message["type"] == "http.request"
        body = json.dumps(error.to_body()).encode()
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        await send({"type": "http.response.start", "status": error.code.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the limits of :class:`HttpServerLimits`; made per
    set of limits by :func:`guarded_protocol`. The routes the application answers itself
    (``http_direct_route``, :mod:`core.http_direct`) skip the ASGI scope and cycle."""

    limits: ClassVar[HttpServerLimits] = HttpServerLimits()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_head = True  # reading a request line and headers
        self._head_bytes = 0
        # One timer per connection, moved lazily: a request sets a deadline (a float) and
        # the timer, when it fires early, waits again for the deadline then in force. A
        # timer per request phase cost three call_later and three cancels a request.
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._deadline: float | None = None
        self._why: tuple[float, str] = (0.0, "")
        self._refused = False
        self._dropped = 0
        self._route = router_of(self.app)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(cast(asyncio.Transport, _Coalescing(transport, self.loop)))
        self._arm(self.limits.header_timeout_s, "the request's headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._timer is not None:  # it would keep the closed connection for a while
            self._timer.cancel()
            self._timer = None
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self.transport.close()
            return
        if self._in_head:
            self._head_bytes += len(data)
        self._feed(data)
        if self._in_head and self._head_bytes > self.limits.max_header_bytes:
            limit = self.limits.max_header_bytes
            self._refuse(
                HeadersTooLarge(
                    f"the request line and headers are over {limit} bytes, the most taken here"
                )
            )

    def _feed(self, data: bytes) -> None:
        """uvicorn's ``data_received``, but a request the parser refuses is answered as any
        other refusal: JSON with a stable code and what to fix."""
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            self._refuse(_not_http(exc))

    def on_message_begin(self) -> None:
        if self._route is None:
            super().on_message_begin()
        else:  # the scope is made once the request is known not to be a direct one
            self.url, self.headers, self.expect_100_continue = b"", [], False
        if self._deadline is None:  # the next request of a kept-alive connection
            self._arm(self.limits.header_timeout_s, "the request's headers")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._arm(self.limits.body_timeout_s, "the request's body")
        version = self.parser.get_http_version()
        problem = _host_problem(self.headers, version)
        if self._route is not None:
            if problem is None and self._direct(version):
                return
            self._scope()
        if problem is None:
            super().on_headers_complete()
            return
        app, self.app = self.app, _refusing_app(problem)  # this request only
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def _direct(self, version: str) -> bool:
        """Start (or queue behind a pipelined one) the request as a :class:`DirectCycle` if
        the application answers its route itself."""
        assert self._route is not None
        path = request_path(self.url)
        if path is None or self.parser.should_upgrade() or self.limit_concurrency is not None:
            return False
        handler = self._route(self.parser.get_method(), path)
        if handler is None:
            return False
        cycle: Any = DirectCycle(  # uvicorn's code takes it for one of its cycles
            self,
            handler,
            self.headers,
            keep_alive=version != "1.0" and self.parser.should_keep_alive(),
            expect_100_continue=self.expect_100_continue,
            default_headers=self.server_state.default_headers,  # date, server: as uvicorn
        )
        existing, self.cycle = self.cycle, cycle
        if existing is None or existing.response_complete:
            self._start_asgi_task(cycle, self.app)
        else:  # pipelined: answered in order, after the one before
            self.flow.pause_reading()
            self.pipeline.appendleft((cycle, self.app))
        return True

    def _scope(self) -> None:
        """uvicorn's scope of the request whose line and headers were just read."""
        url, headers, expect = self.url, self.headers, self.expect_100_continue
        super().on_message_begin()
        self.url, self.headers, self.expect_100_continue = url, headers, expect
        self.scope["headers"] = headers

    def on_body(self, body: bytes) -> None:
        cycle: object = self.cycle
        if type(cycle) is DirectCycle:
            if not cycle.response_complete:
                cycle.feed(body)
        else:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        self._in_head, self._head_bytes = True, 0
        cycle: object = self.cycle
        if type(cycle) is DirectCycle:
            cycle.end()
        else:
            super().on_message_complete()

    # What a DirectCycle asks of its connection.
    def pause_reading(self) -> None:
        self.flow.pause_reading()

    def resume_reading(self) -> None:
        self.flow.resume_reading()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def write_answer(self, data: bytes, close: bool) -> None:
        cast(_Coalescing, self.transport).write_now(data)
        if close:
            self.transport.close()

    def _arm(self, seconds: float, what: str) -> None:
        deadline = self.loop.time() + seconds
        self._deadline, self._why = deadline, (seconds, what)
        if self._timer is None or self._timer_at > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer, self._timer_at = self.loop.call_at(deadline, self._due), deadline

    def _disarm(self) -> None:
        self._deadline = None  # the timer, if it is set, finds nothing due

    def _due(self) -> None:
        self._timer = None
        deadline = self._deadline
        if deadline is None:
            return
        if self.loop.time() < deadline:  # moved on since the timer was set
            self._timer, self._timer_at = self.loop.call_at(deadline, self._due), deadline
            return
        self._deadline = None
        self._timed_out(*self._why)

    def _timed_out(self, seconds: float, what: str) -> None:
        if self.transport.is_closing():
            return
        if self._in_head and self._head_bytes == 0:  # not a byte of a request: just close
            self.transport.close()
        elif self._in_head or self.cycle is None or not self.cycle.response_started:
            # (in the head: the cycle, if any, is the request before, answered already)
            self._refuse(RequestTimeout(f"{what} did not come within {seconds:g} s"))
        else:  # the application answered already; only the rest of the body is late
            self.transport.close()

    def _refuse(self, error: HttpbusError) -> None:
        """Answer ``error``, stop reading requests, and close after a short linger."""
        if self.transport.is_closing() or self._refused:
            return
        self._disarm()
        self._refused = True
        if self.cycle is not None:
            self.cycle.disconnected = True  # the application's answer, if any, goes nowhere
        self.transport.write(error_answer(error))
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def guarded_protocol(limits: HttpServerLimits) -> type[GuardedHttpToolsProtocol]:
    """A protocol class for uvicorn's ``http`` option that enforces ``limits``."""
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,), {"limits": limits})


def uvicorn_options(limits: HttpServerLimits) -> dict[str, Any]:
    """The options of ``uvicorn.run`` / ``uvicorn.Config`` that enforce ``limits``. Proxy
    headers are read only from ``forwarded_allow_ips``: uvicorn's own default believes
    ``X-Forwarded-For`` from 127.0.0.1 (or ``$FORWARDED_ALLOW_IPS``), so any client on the
    host, or one behind a local proxy that appends to the header, could name its address
    (and escape the login throttle by naming a new one each time)."""
    trusted = list(limits.forwarded_allow_ips)
    return {
        "http": guarded_protocol(limits),
        "timeout_keep_alive": limits.keep_alive_s,
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
    }

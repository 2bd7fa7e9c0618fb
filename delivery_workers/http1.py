"""The wire side of :class:`.http_sender.HttpSender`: one HTTP/1.1 keep-alive connection as an
asyncio Protocol with an httptools parser, and the request encoded as one ``bytes``.

A delivery is one small request and one small answer. aiohttp spends most of a send in its
general machinery (request and response objects, multidict headers, stream readers, timers);
here a send is: take an idle connection of the endpoint's origin (or open one), write the
request as one ``bytes``, and wait for one future that the parser's callbacks resolve with
the status, the two answer headers httpbus reads (``Retry-After``, ``Location``) and the start
of the body. The same request (:func:`.sender.build_request`) is sent, byte for byte (header
values are latin-1, so a carried obs-text value goes out as it came in), and classified the
same way (:class:`core.result.DeliveryResult`) as by the senders ``bench/`` compares:

- each attempt is bounded, from the wait for a connection to the end of the answer, by the
  endpoint's ``timeout_ms``; a timeout is ``timeout after N ms (TimeoutError)``;
- a refused or lost connection is ``connection error: ...`` (retryable). A request written on
  a *reused* connection that the endpoint closed before answering a byte (it closed the idle
  connection as the request went out) is sent once more on a new connection: at least once,
  as always, and receivers dedupe on ``webhook-id``;
- a header name that is not a token, or a value with control characters or outer
  whitespace, is refused before anything is sent (``invalid request: Illegal header ...``);
- at most :data:`.sender.MAX_RESPONSE_BYTES` of an answer is kept; a connection whose answer
  was longer is closed, not read to its end;
- the head is counted before httptools sees it, and each phase is timed
  (:mod:`.answer_limits`): an answer over a limit, a ``101`` or one that is not HTTP/1.1 is
  ``invalid response: ...`` (:class:`~.answer_limits.InvalidAnswer`), a slow head or body a
  timeout (``HeadTimeout``, ``BodyTimeout``); the connection is closed, not read further;
- redirects are never followed, nothing is compressed or decompressed, no cookies, no proxy.

HTTPS goes through the ``ssl`` context given (default: the system's trust store, hostnames
checked). HTTP/2, where an HTTPS endpoint selects it through ALPN, is :mod:`.http2`.
"""

from __future__ import annotations

import asyncio
import re
from functools import lru_cache
from typing import NamedTuple, cast
from urllib.parse import urlsplit

import httptools

from core.http_fields import NAME_RE, VALUE_RE
from core.http_fields import TOKEN as _TOKEN
from core.http_fields import VALUE as _VALUE

from .answer_limits import (
    BODY_WIRE_FACTOR,
    AnswerLimits,
    BodyTimeout,
    HeadGuard,
    HeadTimeout,
    InvalidAnswer,
)
from .sender import MAX_RESPONSE_BYTES, OutgoingRequest

# One match over the whole header section as written ("name: value\r\n" each) is cheaper than
# one per header. A name holds no ":" or space and a value no CR or LF, so with exactly one
# CRLF per header (a value with an inner CRLF would pass as two headers) the split is the
# one intended.
_HEADER_SECTION = re.compile(rf"(?:{_TOKEN}: {_VALUE}\r\n)*")
_WANTED = {b"retry-after": "retry-after", b"location": "location"}
_FRAMING = {b"content-length", b"transfer-encoding"}
_BODY_WIRE_BYTES = BODY_WIRE_FACTOR * MAX_RESPONSE_BYTES
DEFAULT_LIMITS = AnswerLimits()


class InvalidRequest(ValueError):
    """A request this sender refuses to write (the delivery is rejected, nothing is sent)."""


class Origin(NamedTuple):
    """Where a URL's requests go, and what its request line and ``Host`` header say."""

    scheme: str
    host: str
    port: int
    host_header: str
    target: str

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.scheme, self.host, self.port)


@lru_cache(maxsize=4096)  # one parse per endpoint, not per delivery
def parse_origin(url: str) -> Origin:
    """The origin of an endpoint URL (already validated and normalised by the model)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidRequest(f"not an http(s) URL with a host: {url!r}")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if port == default else f"{shown}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(parts.scheme, host, port, host_header, target)


def _refusal(headers: tuple[tuple[str, str], ...]) -> str:
    for name, value in headers:
        if NAME_RE.fullmatch(name) is None:
            return f"Illegal header name {name!r}"
        if VALUE_RE.fullmatch(value) is None:
            return f"Illegal header value {value!r}"
    return "Illegal header"  # only a value outside latin-1 gets here


def encode_request(out: OutgoingRequest, origin: Origin) -> bytes:
    """The request as written on the wire; :class:`InvalidRequest` for a header HTTP cannot
    carry as given."""
    section = "".join([f"{name}: {value}\r\n" for name, value in out.headers])
    if _HEADER_SECTION.fullmatch(section) is None or section.count("\r\n") != len(out.headers):
        raise InvalidRequest(_refusal(out.headers))
    head = (
        f"{out.method} {origin.target} HTTP/1.1\r\nHost: {origin.host_header}\r\n{section}"
        f"Content-Length: {len(out.body)}\r\n\r\n"
    )
    try:
        return head.encode("latin-1") + out.body
    except UnicodeEncodeError:
        raise InvalidRequest(_refusal(out.headers)) from None


class Answer(NamedTuple):
    """What came back: the status, the headers httpbus reads (lower-case) and the start of
    the body."""

    status: int
    headers: dict[str, str]
    body: bytes


class ConnectionLost(ConnectionError):
    """The endpoint closed the connection (or broke HTTP) before answering in full.
    ``answered``: some of the answer had arrived."""

    def __init__(self, message: str, *, answered: bool) -> None:
        super().__init__(message)
        self.answered = answered


class PooledConnection(asyncio.Protocol):
    """What the sender's pool keeps of a connection of either protocol: its origin and answer
    limits, its transport once made, whether it closed (``gone`` is set once the socket is),
    whether it was reused, and since when it is idle."""

    http2: bool

    def __init__(
        self, origin_key: tuple[str, str, int], limits: AnswerLimits = DEFAULT_LIMITS
    ) -> None:
        self.origin_key = origin_key
        self.limits = limits
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.reused = False
        self.idle_since = 0.0


class Connection(PooledConnection):
    """One HTTP/1.1 connection: one request at a time, keep-alive unless told otherwise."""

    http2 = False

    def __init__(
        self, origin_key: tuple[str, str, int], limits: AnswerLimits = DEFAULT_LIMITS
    ) -> None:
        super().__init__(origin_key, limits)
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future[Answer] | None = None
        self._status = 0
        self._headers: dict[str, str] = {}
        self._body = bytearray()
        self._started = False
        self._framed = False
        self._keep_alive = True
        self._guard = HeadGuard(limits)
        self._timer: asyncio.TimerHandle | None = None  # the phase's time limit
        self._timing: type[TimeoutError] | None = None  # which phase

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's are not asyncio.Transport subclasses).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes nobody asked for: this connection cannot be trusted
            self.close()
            return
        self._started = True
        guard = self._guard
        if not self._counted(guard, data):
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(InvalidAnswer(f"not HTTP/1.1: {exc}"))
        except httptools.HttpParserUpgrade:  # a 101 is refused before, any other upgrade here
            self._fail(InvalidAnswer("an upgrade is not followed"))
        if self._waiter is not None:  # more to come (most answers come whole: no timer)
            self._time_phase(guard)

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._stop_timer()
        if not self.gone.done():
            self.gone.set_result(None)
        if self._waiter is None or self._waiter.done():
            return
        if self._status >= 200 and not self._framed:
            # An answer without a length ends with the connection: that was all of it.
            self._keep_alive = False
            self._finish()
            return
        reason = f": {exc}" if exc else ""
        self._fail(
            ConnectionLost(f"the endpoint closed the connection{reason}", answered=self._started)
        )

    # --- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        lower = name.lower()
        if lower in _FRAMING:
            self._framed = True
        wanted = _WANTED.get(lower)
        if wanted is not None:
            self._headers[wanted] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self._status < 200:
            return
        self._body += body
        if len(self._body) >= MAX_RESPONSE_BYTES:  # enough: keep the start, drop the connection
            self._keep_alive = False
            self._finish()
            self.close()

    def on_message_complete(self) -> None:
        if self._status < 200:  # an interim answer (100 Continue...): the real one follows
            self._status, self._headers, self._framed = 0, {}, False
            return
        self._keep_alive = self._keep_alive and self._parser.should_keep_alive()
        self._finish()

    # --- the sender's side
    def request(self, data: bytes) -> asyncio.Future[Answer]:
        """Write a request; the future is the answer (or :class:`ConnectionLost`)."""
        assert self.transport is not None
        waiter = asyncio.get_running_loop().create_future()
        self._waiter = waiter
        self._status, self._headers, self._body = 0, {}, bytearray()
        self._started, self._framed, self._keep_alive = False, False, True
        self._guard = HeadGuard(self.limits)
        self.transport.write(data)
        return waiter

    @property
    def reusable(self) -> bool:
        """Whether the last exchange ended cleanly on a connection the endpoint keeps."""
        return not self.closed and self._keep_alive and self._waiter is None

    def close(self) -> None:
        """Close now (also mid-answer: a timeout, a long answer)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def _counted(self, guard: HeadGuard, data: bytes) -> bool:
        """Count ``data`` before the parser sees it; False if the answer ended here (over a
        limit: failed; enough of the body read: finished), and the connection with it."""
        was_done = guard.done
        problem = guard.feed(data)
        if problem is not None:
            self._fail(InvalidAnswer(problem))
            return False
        if not was_done or guard.body_bytes <= _BODY_WIRE_BYTES:
            return True
        if self._status < 200:  # the parser saw no final answer where the guard did
            self._fail(InvalidAnswer(f"over {_BODY_WIRE_BYTES} bytes after the head"))
            return False
        self._keep_alive = False  # enough read: keep what came, drop the rest
        self._finish()
        self.close()
        return False

    def _time_phase(self, guard: HeadGuard) -> None:
        """Start the head's timer at its first byte (each interim head's too), the body's as
        the final head ends."""
        if guard.done:
            if self._timing is not BodyTimeout:
                self._start_timer(self.limits.body_timeout_s, BodyTimeout)
        elif guard.in_head:
            if self._timing is not HeadTimeout:
                self._start_timer(self.limits.head_timeout_s, HeadTimeout)
        else:  # between an interim answer and the next
            self._stop_timer()

    def _start_timer(self, seconds: float, kind: type[TimeoutError]) -> None:
        self._stop_timer()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(seconds, self._expired, seconds, kind)
        self._timing = kind

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timing = None, None

    def _expired(self, seconds: float, kind: type[TimeoutError]) -> None:
        self._timer, self._timing = None, None
        self._fail(kind(f"{kind.__name__} after {seconds:g} s"))

    def _finish(self) -> None:
        self._stop_timer()
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(
                Answer(self._status, self._headers, bytes(self._body[:MAX_RESPONSE_BYTES]))
            )

    def _fail(self, exc: Exception) -> None:
        self._stop_timer()
        waiter, self._waiter = self._waiter, None
        self._keep_alive = False
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

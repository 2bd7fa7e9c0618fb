"""Routes an application answers without ASGI (:mod:`core.http_direct`), served by the guarded
protocol on a real uvicorn: what a client sees is what the ASGI path gives, limits included."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from dataclasses import dataclass, field

import pytest
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from core.http_direct import HIGH_WATER, RawHeaders, Receive, request_path, router_of
from core.http_server import HttpServerLimits
from tests.support.guarded_server import CountingApp, Served, guarded_server, read_all

FAST = HttpServerLimits(header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_s=0.5)


@dataclass
class DirectApp(CountingApp):
    """``POST /direct`` answered directly (201, the body's length); ``POST /fail`` raises;
    everything else is the counting ASGI app."""

    direct: list[bytes] = field(default_factory=list)

    def http_direct_route(self, method: bytes, path: bytes) -> object:
        if method != b"POST":
            return None
        return {b"/direct": self._echo, b"/fail": self._fail}.get(path)

    async def _echo(self, headers: RawHeaders, receive: Receive) -> tuple[int, RawHeaders, bytes]:
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return 499, [], b""
            body += message["body"]
            more = message["more_body"]
        self.direct.append(body)
        return 201, [(b"x-got", str(len(body)).encode())], b"done"

    async def _fail(self, headers: RawHeaders, receive: Receive) -> tuple[int, RawHeaders, bytes]:
        raise RuntimeError("a bug")


def _post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return b"POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n%s\r\n%s" % (
        path,
        len(body),
        extra,
        body,
    )


def _answers(sock: socket.socket, count: int, deadline_s: float = 5) -> list[bytes]:
    """``count`` whole answers (each with a content-length) read from ``sock``."""
    end, got = time.monotonic() + deadline_s, b""
    found: list[bytes] = []
    while len(found) < count:
        head, sep, rest = got.partition(b"\r\n\r\n")
        if sep:
            length = int(head.lower().partition(b"content-length: ")[2].split(b"\r\n")[0] or 0)
            if len(rest) >= length:
                found.append(head + sep + rest[:length])
                got = rest[length:]
                continue
        sock.settimeout(max(0.01, end - time.monotonic()))
        assert time.monotonic() < end, f"{len(found)} of {count} answers came"
        got += sock.recv(65536)
    return found


@pytest.fixture
def served() -> object:
    with guarded_server(FAST, DirectApp()) as found:
        yield found


def test_a_direct_route_is_answered_without_the_app_and_others_with_it(served: Served) -> None:
    app = served.app
    assert isinstance(app, DirectApp)
    with served.connect() as sock:
        sock.sendall(_post(b"/direct", b"abc") + _post(b"/other", b"x") + _post(b"/direct", b""))
        first, second, third = _answers(sock, 3)
    assert first.startswith(b"HTTP/1.1 201 Created\r\n") and b"x-got: 3\r\n" in first
    assert first.endswith(b"\r\n\r\ndone") and b"connection: close" not in first
    assert b"\r\ndate: " in first  # RFC 9110: an origin server with a clock sends Date
    assert second.startswith(b"HTTP/1.1 200") and third.startswith(b"HTTP/1.1 201")
    assert app.direct == [b"abc", b""] and app.bodies == [b"x"] and app.calls == 1


def test_a_body_larger_than_the_buffer_comes_whole(served: Served) -> None:
    body = bytes(range(256)) * (3 * HIGH_WATER // 256)
    with served.connect() as sock:
        sock.sendall(_post(b"/direct", body))
        [answer] = _answers(sock, 1)
    assert b"x-got: %d\r\n" % len(body) in answer
    assert served.app.direct == [body]  # type: ignore[attr-defined]


def test_a_handler_that_raises_is_a_500_and_the_connection_closes(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(_post(b"/fail", b"x") + _post(b"/direct", b"y"))
        answer = read_all(sock, deadline_s=5)
    assert answer.startswith(b"HTTP/1.1 500") and answer.count(b"HTTP/1.1") == 1
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == "internal"
    with served.connect() as sock:  # the server goes on
        sock.sendall(_post(b"/direct", b"z", b"Connection: close\r\n"))
        answer = read_all(sock, deadline_s=5)
    assert answer.startswith(b"HTTP/1.1 201") and b"connection: close" in answer


def test_a_slow_direct_body_is_408(served: Served) -> None:
    with served.connect() as sock:
        sock.sendall(_post(b"/direct", b"0123456789")[:-5])  # five bytes never come
        answer = read_all(sock, deadline_s=5)
    assert answer.startswith(b"HTTP/1.1 408")
    assert served.app.direct == []  # type: ignore[attr-defined]


def test_timers_hold_on_a_kept_alive_connection(served: Served) -> None:
    """The guard's one timer per connection, moved lazily: after quick requests, a slow
    request's headers are still refused in time, and an idle connection still closes."""
    with served.connect() as sock:
        for _ in range(3):
            sock.sendall(_post(b"/direct", b"a"))
            _answers(sock, 1)
        time.sleep(0.3)  # part of the next deadline passes before the request starts
        start = time.monotonic()
        sock.sendall(b"POST /direct HTTP/1.1\r\nHost: t\r\n")
        answer = read_all(sock, deadline_s=5)
        took = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408") and 0.4 < took < 3, took
    with served.connect() as sock:
        sock.sendall(_post(b"/direct", b"a"))
        _answers(sock, 1)
        assert read_all(sock, deadline_s=5) == b""  # closed after keep_alive_s


def test_expect_100_continue_then_the_body(served: Served) -> None:
    with served.connect() as sock:
        request = _post(b"/direct", b"later", b"Expect: 100-continue\r\n")
        sock.sendall(request[:-5])
        sock.settimeout(5)
        assert sock.recv(4096) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(b"later")
        [answer] = _answers(sock, 1)
    assert answer.startswith(b"HTTP/1.1 201") and b"x-got: 5\r\n" in answer


@pytest.mark.parametrize(
    ("url", "path"),
    [
        (b"/v1/a", b"/v1/a"),
        (b"/v1/a?b=c", b"/v1/a"),
        (b"/v1/%61", None),  # escapes are decoded by the ASGI path
        (b"http://h/v1/a", None),  # absolute form
        (b"*", None),
    ],
)
def test_request_path(url: bytes, path: bytes | None) -> None:
    assert request_path(url) == path


def test_the_route_is_found_behind_uvicorns_wrapper_only() -> None:
    app = DirectApp()
    assert router_of(app) is not None
    assert router_of(ProxyHeadersMiddleware(app)) is not None
    assert router_of(CountingApp()) is None
    assert router_of(ProxyHeadersMiddleware(CountingApp())) is None

    class Other:
        def __init__(self, app: object) -> None:
            self.app = app

    assert router_of(Other(app)) is None  # a middleware of the application's own: not skipped


def test_a_client_gone_mid_body_is_seen_by_the_handler(served: Served) -> None:
    sock = served.connect()
    sock.sendall(_post(b"/direct", b"0123456789")[:-5])
    time.sleep(0.05)
    sock.close()
    asyncio.run(asyncio.sleep(0.2))
    assert served.app.direct == []  # type: ignore[attr-defined]

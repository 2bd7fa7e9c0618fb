"""Every service's HTTP server refuses oversized and slow requests before any application code
(issue 17): a real uvicorn on loopback with :func:`core.http_server.uvicorn_options`."""

from __future__ import annotations

import asyncio
import gc
import importlib
import json
import logging
import time
from typing import Any

import pytest
import uvicorn

from core.http_server import GuardedHttpToolsProtocol, HttpServerLimits
from tests.support.guarded_server import Served, guarded_server, read_all

FAST = HttpServerLimits(header_timeout_s=0.5, body_timeout_s=0.5, keep_alive_s=0.5)


def _ok(served: Served) -> None:
    """An ordinary request still gets its answer."""
    with served.connect() as sock:
        sock.sendall(
            b"POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi"
        )
        answer = read_all(sock, deadline_s=5)
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")


def _json_body(answer: bytes) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(answer.partition(b"\r\n\r\n")[2])
    return found


def test_a_header_section_over_the_limit_is_431_before_the_app() -> None:
    with guarded_server(HttpServerLimits()) as served:
        with served.connect() as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 100_000 + b"\r\n")
            answer = read_all(sock, deadline_s=5)
        assert answer.startswith(b"HTTP/1.1 431")
        body = _json_body(answer)
        assert body["code"] == "headers_too_large" and "65536 bytes" in body["message"]
        assert served.app.calls == 0
        _ok(served)


def test_a_64_mb_header_is_refused_quickly_and_never_buffered() -> None:
    with guarded_server(HttpServerLimits()) as served:
        sent, start = 0, time.monotonic()
        chunk = b"a" * (256 * 1024)
        with served.connect() as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer x\r\nX-Big: ")
            try:
                while sent < 64 * 1024 * 1024:
                    sock.sendall(chunk)
                    sent += len(chunk)
            except (ConnectionResetError, BrokenPipeError):
                pass
            except TimeoutError:  # the server stopped reading: it refused us too
                pass
        elapsed = time.monotonic() - start
        assert sent < 16 * 1024 * 1024, f"the server took {sent} bytes of one header"
        assert elapsed < 5, f"the refusal took {elapsed:.1f} s"
        assert served.app.calls == 0
        _ok(served)


def test_slow_headers_are_408_and_closed() -> None:
    with guarded_server(FAST) as served:
        with served.connect() as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")  # and never the end of the headers
            answer = read_all(sock, deadline_s=5)
        assert answer.startswith(b"HTTP/1.1 408")
        assert _json_body(answer)["code"] == "request_timeout"
        assert served.app.calls == 0
        _ok(served)


def test_a_slow_body_is_408_and_closed() -> None:
    with guarded_server(FAST) as served:
        with served.connect() as sock:
            sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n0123456789")
            answer = read_all(sock, deadline_s=5)
        assert answer.startswith(b"HTTP/1.1 408")
        assert served.app.bodies == []  # the app never saw the body whole
        _ok(served)


def test_an_idle_connection_is_closed_without_an_answer() -> None:
    with guarded_server(FAST) as served, served.connect() as sock:
        assert read_all(sock, deadline_s=5) == b""


def test_keep_alive_requests_still_work_and_idle_ones_close() -> None:
    with guarded_server(FAST) as served, served.connect() as sock:
        for _ in range(3):
            sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx")
            sock.settimeout(5)
            got = b""
            while not got.endswith(b"ok"):
                got += sock.recv(4096)
            assert got.startswith(b"HTTP/1.1 200")
        assert read_all(sock, deadline_s=5) == b""  # closed after keep_alive_s
        assert served.app.calls == 3


def test_slow_headers_of_a_kept_alive_connections_next_request_are_408() -> None:
    """The request before was answered: the late one still gets its 408, not a silent close."""
    with guarded_server(FAST) as served, served.connect() as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\n\r\nx")
        sock.settimeout(5)
        got = b""
        while not got.endswith(b"ok"):
            got += sock.recv(4096)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: t\r\n")  # and never the end of the headers
        answer = read_all(sock, deadline_s=5)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:60]
    assert _json_body(answer)["code"] == "request_timeout"


@pytest.mark.parametrize(
    "head",
    [
        b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",  # no Host
        b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",  # two
        b"POST / HTTP/1.1\r\nHost: a\r\nhost: a\r\nContent-Length: 2\r\n\r\nhi",
        b"GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
    ],
)
def test_a_request_without_exactly_one_host_is_400_before_the_app(head: bytes) -> None:
    """RFC 9112 (3.2): a server must answer 400 to an HTTP/1.1 request without ``Host`` and
    to any request with two (issue 38); every service runs this protocol."""
    with guarded_server(HttpServerLimits()) as served:
        with served.connect() as sock:
            sock.sendall(head)
            answer = read_all(sock, deadline_s=5)
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        body = _json_body(answer)
        assert body["code"] == "malformed" and "exactly one Host" in body["message"]
        assert served.app.calls == 0
        _ok(served)
        with served.connect() as sock:  # HTTP/1.0 needs no Host
            sock.sendall(b"GET / HTTP/1.0\r\n\r\n")
            assert read_all(sock, deadline_s=5).startswith(b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "module", ["producer_api.__main__", "control_plane.__main__", "delivery_workers.__main__"]
)
def test_every_service_runs_its_server_with_the_limits(
    monkeypatch: pytest.MonkeyPatch, module: str
) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **options: seen.update(options))
    # What main() does to the process besides serving, undone: tests share this process.
    monkeypatch.setattr(gc, "freeze", lambda: None)
    monkeypatch.setattr(gc, "set_threshold", lambda *_: None)
    monkeypatch.setattr(logging, "basicConfig", lambda **_: None)
    monkeypatch.setenv("HTTPBUS_ADMIN_TOKEN", "a-token-of-the-test-0123456789")
    monkeypatch.setenv("HTTPBUS_HTTP_SERVER__MAX_HEADER_BYTES", "8192")
    importlib.import_module(module).main([])
    assert issubclass(seen["http"], GuardedHttpToolsProtocol)
    assert seen["http"].limits.max_header_bytes == 8192
    assert seen["timeout_keep_alive"] == HttpServerLimits().keep_alive_s


def test_the_limits_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="max_header_bytes"):
        HttpServerLimits(max_header_bytes=10)


class _Recording:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.events: list[str] = []

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return False

    def write_eof(self) -> None:
        self.events.append("eof")

    def close(self) -> None:
        self.events.append("close")

    def get_extra_info(self, name: str) -> str:
        return f"info:{name}"


async def test_a_response_head_and_body_go_out_in_one_write() -> None:
    from core.http_server import _Coalescing

    raw = _Recording()
    coalescing = _Coalescing(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    coalescing.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")
    coalescing.write(b"{}")
    assert raw.writes == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}"]
    coalescing.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # alone: out by the next iteration
    assert len(raw.writes) == 1
    await asyncio.sleep(0)
    assert raw.writes[-1] == b"HTTP/1.1 100 Continue\r\n\r\n"
    coalescing.write(b"last")
    coalescing.write_eof()
    coalescing.close()
    assert raw.writes[-1] == b"last" and raw.events == ["eof", "close"]
    assert coalescing.get_extra_info("peername") == "info:peername"

""":class:`HttpSender` against a raw asyncio TCP server that answers byte for byte as each test
scripts it: keep-alive reuse, connections the endpoint closes (idle, mid-request, after a
``Connection: close``), chunked and close-delimited answers, interim 1xx answers, broken HTTP,
the pool's limit across origins, keep-alive expiry and TLS. The sender contract (the request
as built, results, timeouts, pooling) is in test_sender.py."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import uvloop
from pydantic import ValidationError

from core.endpoint_policy import EndpointPolicy
from core.model import RetryPolicy
from core.result import ErrorKind
from core.retry import retries
from delivery_workers.http1 import ConnectionLost, InvalidRequest, encode_request, parse_origin
from delivery_workers.http_sender import ConnectionPool, HttpSender, make_sender
from delivery_workers.sender import Delivery, OutgoingRequest
from delivery_workers.settings import WorkerSettings
from tests.support.h2_endpoint import make_certificate
from tests.support.senders import delivery_to

OK = b"HTTP/1.1 204 No Content\r\n\r\n"

# (request number on this connection, from 1; the request head) -> bytes to write, or None
# to close the connection without answering.
Answerer = Callable[[int, bytes], bytes | None]


@dataclass
class RawServer:
    """Counts connections and requests; answers each request as ``answer`` says."""

    answer: Answerer
    close_after_reply: bool = False
    connections: int = 0
    requests: list[tuple[int, bytes]] = field(default_factory=list)  # (connection, head)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        conn, n = self.connections, 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                n += 1
                self.requests.append((conn, head))
                reply = self.answer(n, head)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if self.close_after_reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    def url(self, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}/hook"


Serve = Callable[..., Awaitable[RawServer]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    servers: list[asyncio.Server] = []

    async def start(
        answer: Answerer, ssl_context: ssl.SSLContext | None = None, *, close: bool = False
    ) -> RawServer:
        raw = RawServer(answer, close)
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0, ssl=ssl_context)
        servers.append(server)
        raw.port = server.sockets[0].getsockname()[1]
        return raw

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


def _delivery(url: str, timeout_ms: int = 2_000) -> Delivery:
    return delivery_to(url, timeout_ms)


def _always(reply: bytes) -> Answerer:
    return lambda _n, _head: reply


async def test_sequential_sends_reuse_one_kept_alive_connection(serve: Serve) -> None:
    server = await serve(_always(OK))
    async with HttpSender() as s:
        results = [await s.send(_delivery(server.url())) for _ in range(5)]
        assert s.pool.open_connections == 1
    assert all(r.succeeded and r.status == 204 for r in results)
    assert server.connections == 1 and len(server.requests) == 5


async def test_the_request_line_and_host_header(serve: Serve) -> None:
    server = await serve(_always(OK))
    async with HttpSender() as s:
        assert (await s.send(_delivery(server.url("localhost") + "?a=1&b=%20"))).succeeded
    [(_, head)] = server.requests
    assert head.startswith(
        f"POST /hook?a=1&b=%20 HTTP/1.1\r\nHost: localhost:{server.port}\r\n".encode()
    )


async def test_connection_close_from_the_endpoint_is_honoured(serve: Serve) -> None:
    server = await serve(
        _always(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
    )
    async with HttpSender() as s:
        assert (await s.send(_delivery(server.url()))).succeeded
        assert (await s.send(_delivery(server.url()))).succeeded
        assert s.pool.open_connections == 0
    assert server.connections == 2


async def test_a_kept_alive_connection_closed_as_the_request_goes_is_sent_again(
    serve: Serve,
) -> None:
    # Each connection answers its first request, then hangs up on the next without a byte.
    server = await serve(lambda n, _head: OK if n == 1 else None)
    async with HttpSender() as s:
        assert (await s.send(_delivery(server.url()))).succeeded
        second = await s.send(_delivery(server.url()))
    assert second.succeeded and second.status == 204
    assert [conn for conn, _ in server.requests] == [1, 1, 2]


async def test_a_new_connection_closed_without_an_answer_is_not_sent_again(
    serve: Serve,
) -> None:
    server = await serve(lambda _n, _head: None)
    async with HttpSender() as s:
        result = await s.send(_delivery(server.url()))
        assert s.pool.open_connections == 0
    assert retries(RetryPolicy(), result) and result.status is None
    assert result.error is not None
    assert result.error.startswith("connection error: ConnectionLost: the endpoint closed")
    assert len(server.requests) == 1


async def test_a_chunked_answer_is_read_and_the_connection_kept(serve: Serve) -> None:
    chunked = (
        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 7\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"3\r\nbus\r\n2\r\ny!\r\n0\r\n\r\n"
    )
    server = await serve(_always(chunked))
    async with HttpSender() as s:
        first = await s.send(_delivery(server.url()))
        second = await s.send(_delivery(server.url()))
    for result in (first, second):
        assert retries(RetryPolicy(), result) and result.status == 503 and result.retry_after == 7
        assert result.error == "HTTP 503: busy!"
    assert server.connections == 1


async def test_an_answer_delimited_by_closing_is_read_to_the_end(serve: Serve) -> None:
    server = await serve(_always(b"HTTP/1.1 400 Bad Request\r\n\r\nno such order"), close=True)
    async with HttpSender() as s:
        result = await s.send(_delivery(server.url()))
        assert s.pool.open_connections == 0
    assert not retries(RetryPolicy(), result) and result.error == "HTTP 400: no such order"


async def test_a_body_cut_short_of_its_length_is_a_connection_error(serve: Serve) -> None:
    server = await serve(
        _always(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort"), close=True
    )
    async with HttpSender() as s:
        result = await s.send(_delivery(server.url()))
    assert retries(RetryPolicy(), result) and result.status is None and result.error is not None
    assert result.error.startswith("connection error: ConnectionLost: the endpoint closed")


async def test_an_interim_answer_is_skipped(serve: Serve) -> None:
    server = await serve(_always(b"HTTP/1.1 100 Continue\r\n\r\n" + OK))
    async with HttpSender() as s:
        result = await s.send(_delivery(server.url()))
    assert result.succeeded and result.status == 204


async def test_an_answer_that_is_not_http_is_an_invalid_response(serve: Serve) -> None:
    server = await serve(_always(b"SSH-2.0-OpenSSH_9.6\r\n\r\n"))
    async with HttpSender() as s:
        result = await s.send(_delivery(server.url()))
        assert s.pool.open_connections == 0
    assert retries(RetryPolicy(), result) and result.error is not None
    assert result.error_kind is ErrorKind.INVALID_RESPONSE
    assert result.error.startswith("invalid response: not HTTP/1.1")


async def test_at_the_limit_an_idle_connection_of_another_origin_makes_room(
    serve: Serve,
) -> None:
    a, b = await serve(_always(OK)), await serve(_always(OK))
    async with HttpSender(max_connections=1) as s:
        assert (await s.send(_delivery(a.url()))).succeeded
        assert (await s.send(_delivery(b.url()))).succeeded
        assert (await s.send(_delivery(a.url()))).succeeded
        assert s.pool.open_connections == 1
    assert (a.connections, b.connections) == (2, 1)


async def test_an_idle_connection_past_its_keepalive_is_not_reused(serve: Serve) -> None:
    server = await serve(_always(OK))
    async with HttpSender(keepalive_expiry=0.1) as s:
        assert (await s.send(_delivery(server.url()))).succeeded
        await asyncio.sleep(0.25)
        assert (await s.send(_delivery(server.url()))).succeeded
        assert s.pool.open_connections == 1
    assert server.connections == 2


async def test_a_cancelled_send_closes_its_connection(serve: Serve) -> None:
    server = await serve(lambda _n, _h: b"")  # never answers
    async with HttpSender() as s:
        task = asyncio.create_task(s.send(_delivery(server.url(), timeout_ms=5_000)))
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert s.pool.open_connections == 0


async def test_closing_closes_the_sockets_in_use_too_before_it_returns(serve: Serve) -> None:
    """A runner cancelled without awaiting its sends must not leave a socket for the garbage
    collector: the loop may stop right after ``aclose`` (an unclosed-socket warning then)."""
    server = await serve(lambda _n, _h: b"")  # never answers
    s = HttpSender()
    idle_server = await serve(_always(OK))
    assert (await s.send(_delivery(idle_server.url()))).succeeded
    pending = asyncio.create_task(s.send(_delivery(server.url(), timeout_ms=5_000)))
    await asyncio.sleep(0.2)
    conns = list(s.pool._every)
    assert len(conns) == 2
    await s.aclose()
    assert all(c.gone.done() and c.transport.is_closing() for c in conns)  # type: ignore[union-attr]
    result = await pending
    assert not result.succeeded and "closed" in (result.error or "")
    late = await s.send(_delivery(idle_server.url()))
    assert not late.succeeded and "sender is closed" in (late.error or "")
    assert s.pool.open_connections == 0


def test_encoding_refuses_what_http_cannot_carry() -> None:
    origin = parse_origin("http://h/x")
    good = OutgoingRequest("POST", "http://h/x", (("X-Latin", "caf\xe9"),), b"ab")
    assert encode_request(good, origin) == (
        b"POST /x HTTP/1.1\r\nHost: h\r\nX-Latin: caf\xe9\r\nContent-Length: 2\r\n\r\nab"
    )
    for headers, refused in [
        ((("X-Wide", "\u20ac"),), "Illegal header"),
        ((("X-Split", "a\nb"),), "Illegal header value"),
        ((("X-Split", "a\r\nX-Injected: 1"),), "Illegal header value"),
        ((("X-Ok", "a"), ("X-Padded", "b ")), "Illegal header value 'b '"),
        ((("Bad:Name", "a"),), "Illegal header name"),
    ]:
        with pytest.raises(InvalidRequest, match=refused):
            encode_request(OutgoingRequest("POST", "http://h/x", headers, b""), origin)


def test_origins() -> None:
    assert parse_origin("https://[::1]/p?q").host_header == "[::1]"
    assert parse_origin("https://[::1]:8443/").key == ("https", "::1", 8443)
    assert parse_origin("http://h:80").target == "/"


# --- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    return make_certificate(tmp_path_factory.mktemp("tls"))


async def test_https_with_a_trusted_certificate(
    serve: Serve, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    server = await serve(_always(OK), server_side)
    trusting = ssl.create_default_context(cafile=str(cert))
    async with HttpSender(ssl_context=trusting) as s:
        results = [await s.send(_delivery(server.url("localhost", "https"))) for _ in range(3)]
    assert all(r.succeeded for r in results) and server.connections == 1
    async with HttpSender() as s:  # the system's trust store does not know this certificate
        refused = await s.send(_delivery(server.url("localhost", "https")))
    assert retries(RetryPolicy(), refused) and refused.error is not None
    assert "CERTIFICATE_VERIFY_FAILED" in refused.error
    assert len(server.requests) == 3


def test_on_uvloop_as_the_worker_runs() -> None:
    async def main() -> tuple[list[bool], int]:
        raw = RawServer(_always(OK))
        server = await asyncio.start_server(raw.handle, "127.0.0.1", 0)
        raw.port = server.sockets[0].getsockname()[1]
        async with server, HttpSender() as s:
            results = [(await s.send(_delivery(raw.url()))).succeeded for _ in range(3)]
        return results, raw.connections

    assert uvloop.run(main()) == ([True, True, True], 1)


@pytest.mark.parametrize("kind", [None, "fast", "aiohttp", "httpx"])  # older configs start too
def test_the_worker_runs_the_http_sender(kind: str | None) -> None:
    options = {} if kind is None else {"sender": kind}
    sender = make_sender(WorkerSettings(max_connections=7, **options))
    assert type(sender) is HttpSender
    assert sender.pool.max_connections == 7


def test_an_unknown_sender_setting_is_refused() -> None:
    with pytest.raises(ValidationError, match="sender"):
        WorkerSettings(sender="curl")


async def test_a_connection_made_as_the_pool_closes_is_closed_not_handed_out() -> None:
    """A delivery connecting while the worker stops: the pool's close does not see the new
    connection, so it must not be handed out (it would be left open as the loop ends)."""
    accepted: list[asyncio.StreamWriter] = []

    async def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = ConnectionPool(4, 30.0, None, policy=EndpointPolicy(allow_private_networks=True))
    try:
        # The policy resolves the host first: the pool closes during that await.
        connecting = asyncio.create_task(pool.acquire(parse_origin(f"http://127.0.0.1:{port}/")))
        await asyncio.sleep(0)
        await pool.close()
        with pytest.raises(ConnectionLost):
            await connecting
        assert pool._every == set()
    finally:
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()

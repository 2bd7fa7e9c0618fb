"""The HTTP senders httpbus does not run, kept as comparisons for
:class:`delivery_workers.http_sender.HttpSender` (the one production sender): an httpx sender
(HTTP/2 where an HTTPS endpoint offers it) and an aiohttp sender (which sends what aiohttp
cannot write byte for byte through the httpx one). Both implement
:class:`delivery_workers.sender.EndpointSender`, send the same request
(:func:`delivery_workers.sender.build_request`) and report the same facts
(:class:`core.result.DeliveryResult`).

Run it to compare their throughput on loopback (figures only, no assertion)::

    .venv/bin/python bench/senders.py --deliveries 20000 --in-flight 100

``--http2`` compares instead HttpSender's two protocols over TLS to one endpoint (a process of
its own, offering h2 and http/1.1): HTTP/1.1 keep-alive against negotiated HTTP/2, with the
same in-flight limit, printing deliveries/s, the sender's CPU per delivery and the
connections it opened::

    .venv/bin/python bench/senders.py --http2 --deliveries 10000 --in-flight 100

httpx spends most of a small request in its connection pool (httpcore); aiohttp does the same
work for a fraction of the CPU; HttpSender does only what a delivery needs (see its module).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import re
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import aiohttp
import httpx
import uvicorn
import uvloop
from yarl import URL

from core.lifecycle import AsyncResource
from core.result import DeliveryResult, ErrorKind, timeout_error
from delivery_workers.http_sender import HttpSender
from delivery_workers.sender import (
    MAX_RESPONSE_BYTES,
    Delivery,
    EndpointSender,
    OutgoingRequest,
    build_request,
)
from tests.support.senders import delivery_to

ROOT = Path(__file__).resolve().parent.parent


def _encoded(out: OutgoingRequest) -> list[tuple[bytes, bytes]]:
    # Bytes, so that a carried latin-1 value goes out as it came in (httpx would encode a
    # str as ASCII and refuse it).
    return [(name.encode("latin-1"), value.encode("latin-1")) for name, value in out.headers]


async def _read_capped(response: httpx.Response) -> bytes:
    """The start of the response body: enough to show in the DLQ, never the whole of a huge
    one. A body read to its end lets the connection go back to the pool."""
    body = bytearray()
    async for chunk in response.aiter_raw():
        body += chunk
        if len(body) >= MAX_RESPONSE_BYTES:
            break
    return bytes(body[:MAX_RESPONSE_BYTES])


def _answered(
    status: int, headers: Any, body: bytes, started: float, clock: Callable[[], float]
) -> DeliveryResult:
    """The endpoint's answer as a result, its latency counted from ``started`` (a
    ``time.perf_counter()``), the same for every sender compared here."""
    latency_s = time.perf_counter() - started
    return DeliveryResult.from_response(status, headers, latency_s, body=body, now=clock())


def _httpx_failure(exc: Exception, latency_s: float) -> DeliveryResult:
    """httpx's errors as facts: its timeouts are timeouts, a request it refuses to make is
    invalid, its transport errors are connection errors; the standard ones as usual."""
    kind = type(exc).__name__
    detail = f"{kind}: {exc}" if str(exc) else kind
    if isinstance(exc, httpx.TimeoutException):
        return DeliveryResult.failure(ErrorKind.TIMEOUT, timeout_error(kind, latency_s), latency_s)
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol | httpx.LocalProtocolError):
        return DeliveryResult.invalid(f"invalid request: {detail}", latency_s)
    if isinstance(exc, httpx.TransportError):
        return DeliveryResult.failure(
            ErrorKind.CONNECTION, f"connection error: {detail}", latency_s
        )
    return DeliveryResult.from_exception(exc, latency_s)


class HttpxSender(AsyncResource):
    """An :class:`EndpointSender` on one shared ``httpx.AsyncClient`` with keep-alive pools.

    Redirects are never followed (see :mod:`.result`). Each attempt is bounded, from start to
    the end of the answer, by the endpoint's ``timeout_ms`` (waiting for a free connection
    included, so size ``max_connections`` above the worker's total in-flight limit). The
    client ignores the environment (no proxy or certificate variables are read).

    ``http2=True`` needs the ``h2`` package (``httpx[http2]``); httpx then speaks HTTP/2 to
    HTTPS endpoints that offer it (ALPN) and HTTP/1.1 to everything else. An injected
    ``client`` is the caller's: ``aclose`` leaves it open.
    """

    def __init__(
        self,
        client: httpx.AsyncClient | None = None,
        *,
        max_connections: int = 1000,
        http2: bool = False,
        keepalive_expiry: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=keepalive_expiry,
            ),
            http2=http2,
            follow_redirects=False,
            trust_env=False,
        )
        self._clock = clock

    async def start(self) -> None:
        """Nothing to open: connections are made on first use and kept alive."""

    async def aclose(self) -> None:
        if self._owns_client:
            await self._client.aclose()

    async def send(self, delivery: Delivery) -> DeliveryResult:
        """One attempt; every failure of the endpoint or the network is a result."""
        endpoint = delivery.subscription.endpoint
        try:
            out = build_request(delivery, int(self._clock()))
            headers = _encoded(out)
        except ValueError as exc:
            return DeliveryResult.invalid(f"cannot build the request: {exc}")
        timeout_s = endpoint.timeout_ms / 1000
        started = time.perf_counter()
        try:
            async with asyncio.timeout(timeout_s):
                request = self._client.build_request(
                    out.method, out.url, headers=headers, content=out.body, timeout=timeout_s
                )
                response = await self._client.send(request, stream=True, follow_redirects=False)
                try:
                    body = await _read_capped(response)
                finally:
                    await response.aclose()
        except Exception as exc:
            return _httpx_failure(exc, time.perf_counter() - started)
        return _answered(response.status_code, response.headers, body, started, self._clock)


# Headers aiohttp writes byte for byte and h11 (under httpx) accepts, one "name NUL value LF"
# each (neither holds a NUL or a LF, so a ":" in a name cannot pass as a value):
# an RFC 9110 token, and a value of visible ASCII with inner spaces and tabs. One match over
# the whole block is about twice as fast as one per header.
_TOKEN = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"
_VALUE = r"(?:[\x21-\x7e](?:[\t\x20-\x7e]*[\x21-\x7e])?)?"
_PLAIN_HEADERS = re.compile(rf"(?:{_TOKEN}\x00{_VALUE}\n)*")
# aiohttp's ``total`` bounds the whole attempt: waiting for a pooled connection, connecting,
# sending, and every read of the answer (an outer asyncio.timeout would cost 5 % of a send).
# It rounds timeouts of at least ``ceil_threshold`` up to a whole second; never, here.
_NEVER = math.inf


@lru_cache(maxsize=4096)  # a URL parse per delivery is a visible share of a send
def _yarl(url: str) -> URL:
    return URL(url, encoded=True)


@lru_cache(maxsize=64)
def _timeout(total_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=total_s, ceil_threshold=_NEVER)


def _plain(out: OutgoingRequest) -> bool:
    """Whether aiohttp sends these headers exactly as :class:`HttpxSender` would."""
    block = "".join([f"{name}\x00{value}\n" for name, value in out.headers])
    return _PLAIN_HEADERS.fullmatch(block) is not None


def _failure(exc: Exception, latency_s: float) -> DeliveryResult:
    """aiohttp's errors in the terms of :meth:`DeliveryResult.from_exception`, which knows
    httpx's: a request aiohttp refuses to make is rejected, any other client error (the
    endpoint hung up, or answered something that is not HTTP) is a retryable connection
    error, as httpx's transport errors are."""
    if isinstance(exc, TimeoutError):
        return DeliveryResult.from_exception(exc, latency_s)
    kind = type(exc).__name__
    detail = f"{kind}: {exc}" if str(exc) else kind
    if isinstance(exc, ValueError | aiohttp.InvalidURL | aiohttp.NonHttpUrlClientError):
        return DeliveryResult.invalid(f"invalid request: {detail}", latency_s)
    if isinstance(exc, aiohttp.ClientError):
        error = f"connection error: {detail}"
        return DeliveryResult.failure(ErrorKind.CONNECTION, error, latency_s)
    return DeliveryResult.from_exception(exc, latency_s)


async def _read_capped_aiohttp(response: aiohttp.ClientResponse) -> bytes:
    """The start of the response body, at most :data:`MAX_RESPONSE_BYTES`. A body read to its
    end lets the connection go back to the pool; one left unread closes it on release."""
    body = bytearray()
    while len(body) < MAX_RESPONSE_BYTES:
        chunk = await response.content.read(MAX_RESPONSE_BYTES - len(body))
        if not chunk:
            break
        body += chunk
    return bytes(body)


class AiohttpSender(AsyncResource):
    """An :class:`EndpointSender` on one shared ``aiohttp.ClientSession`` with keep-alive
    pools: at most ``max_connections`` open at once, and ``max_connections_per_host`` to one
    host and port (0: no limit but the total), as aiohttp's ``limit`` and ``limit_per_host``.

    As :class:`HttpxSender`: redirects are never followed, each attempt is bounded from start
    to the end of the answer by the endpoint's ``timeout_ms`` (waiting for a free connection
    included, so size ``max_connections`` above the worker's total in-flight limit), bodies are
    neither compressed nor decompressed, at most 64 KiB of an answer is read, and the
    environment is ignored (no proxy or netrc). Cookies an endpoint sets are dropped, so one
    subscription never sends another's cookies to a shared host.

    The session is made in :meth:`start` (aiohttp wants a running loop). An injected
    ``session`` is the caller's: ``aclose`` leaves it open; redirects, decompression and the
    timeout are still set per request, its cookie jar and proxy settings are its own.
    """

    def __init__(
        self,
        session: aiohttp.ClientSession | None = None,
        *,
        max_connections: int = 1000,
        max_connections_per_host: int = 0,
        keepalive_expiry: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._owns_session = session is None
        self._session = session
        self._max_connections = max_connections
        self._max_per_host = max_connections_per_host
        self._keepalive_expiry = keepalive_expiry
        self._clock = clock
        self._fallback: HttpxSender | None = None

    async def start(self) -> None:
        """Make the session; connections are opened on first use and kept alive."""
        if self._session is not None:
            return
        connector = aiohttp.TCPConnector(
            limit=self._max_connections,
            limit_per_host=self._max_per_host,
            keepalive_timeout=self._keepalive_expiry,
        )
        self._session = aiohttp.ClientSession(
            connector=connector,
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            auto_decompress=False,
            # Per request, from the endpoint's timeout_ms.
            timeout=aiohttp.ClientTimeout(total=None),
        )

    async def aclose(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
        if self._fallback is not None:
            await self._fallback.aclose()

    async def send(self, delivery: Delivery) -> DeliveryResult:
        """One attempt; every failure of the endpoint or the network is a result."""
        session = self._session
        if session is None:
            raise RuntimeError("AiohttpSender.send before start()")
        try:
            out = build_request(delivery, int(self._clock()))
        except ValueError as exc:
            return DeliveryResult.invalid(f"cannot build the request: {exc}")
        if not _plain(out):
            return await self._send_with_httpx(delivery)
        timeout_s = delivery.subscription.endpoint.timeout_ms / 1000
        started = time.perf_counter()
        try:
            async with session.request(
                out.method,
                # Encoded: the endpoint's URL is validated and normalised already, and must
                # not be re-quoted.
                _yarl(out.url),
                headers=out.headers,
                data=out.body,
                allow_redirects=False,
                auto_decompress=False,
                timeout=_timeout(timeout_s),
            ) as response:
                body = await _read_capped_aiohttp(response)
        except Exception as exc:
            return _failure(exc, time.perf_counter() - started)
        return _answered(response.status, response.headers, body, started, self._clock)

    async def _send_with_httpx(self, delivery: Delivery) -> DeliveryResult:
        if self._fallback is None:
            self._fallback = HttpxSender(
                max_connections=self._max_connections,
                keepalive_expiry=self._keepalive_expiry,
                clock=self._clock,
            )
        return await self._fallback.send(delivery)


# --- the comparison ---------------------------------------------------------------------------


async def _answer(scope: dict[str, Any], receive: Any, send: Any) -> None:
    while (await receive()).get("more_body"):
        pass
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _serve() -> tuple[uvicorn.Server, int]:
    config = uvicorn.Config(_answer, host="127.0.0.1", port=0, lifespan="off", log_level="error")
    server = uvicorn.Server(config)
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, server.servers[0].sockets[0].getsockname()[1]


async def _run(sender: EndpointSender, delivery: Delivery, total: int, in_flight: int) -> float:
    async with sender:
        await sender.send(delivery)  # warm: one connection open
        left = total

        async def lane() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await sender.send(delivery)

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(in_flight)))
        return total / (time.perf_counter() - started)


def _tls_endpoint(cert: str, key: str, ports: Any, stop: Any) -> None:
    """The HTTPS endpoint of ``--http2``, in a process of its own (h2 and http/1.1 by ALPN)."""
    sys.path.insert(0, str(ROOT))
    from tests.support.h2_endpoint import H2Endpoint

    async def serve() -> None:
        endpoint = await H2Endpoint.start(Path(cert), Path(key), status=204)
        ports.put(endpoint.server.sockets[0].getsockname()[1])
        await asyncio.get_running_loop().run_in_executor(None, stop.wait)
        await endpoint.aclose()

    uvloop.run(serve())


async def _timed(
    sender: HttpSender, delivery: Delivery, total: int, in_flight: int
) -> tuple[float, float, int]:
    """(deliveries/s, sender CPU µs per delivery, connections opened) of one run."""
    async with sender:
        await sender.send(delivery)  # warm: TLS handshake and protocol choice done
        left, failed = total, 0

        async def lane() -> None:
            nonlocal left, failed
            while left > 0:
                left -= 1
                failed += not (await sender.send(delivery)).succeeded

        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(in_flight)))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        if failed:
            print(f"  ({failed} deliveries failed)")
        return total / elapsed, 1e6 * cpu / total, sender.pool.open_connections


def _delivery(url: str) -> Delivery:
    """The one delivery every comparison sends again and again: 256 bytes, signed, to
    ``url``, within the endpoint's default timeout (the sender tests' delivery)."""
    return delivery_to(url, timeout_ms=10_000, value=b"x" * 256)


def compare_http2(args: argparse.Namespace) -> None:
    """HttpSender over TLS to one endpoint that offers h2 and http/1.1: HTTP/1.1 keep-alive
    (``http2`` off) against negotiated HTTP/2, with the same in-flight limit."""
    import multiprocessing

    with tempfile.TemporaryDirectory() as where:
        sys.path.insert(0, str(ROOT))
        from tests.support.h2_endpoint import make_certificate

        cert, key = make_certificate(Path(where))
        spawn = multiprocessing.get_context("spawn")
        ports, stop = spawn.Queue(), spawn.Event()
        proc = spawn.Process(target=_tls_endpoint, args=(str(cert), str(key), ports, stop))
        proc.start()
        try:
            port = ports.get(timeout=60)
            delivery = _delivery(f"https://localhost:{port}/hook")
            print(
                f"{args.deliveries:,} deliveries, {args.in_flight} in flight, TLS to one endpoint"
            )
            for label, http2 in (("HTTP/1.1 keep-alive", False), ("HTTP/2 (ALPN)", True)):
                load = os.getloadavg()[0]
                context = ssl.create_default_context(cafile=str(cert))
                sender = HttpSender(ssl_context=context, http2=http2)
                rate, cpu_us, conns = uvloop.run(
                    _timed(sender, delivery, args.deliveries, args.in_flight)
                )
                print(
                    f"{label:>20}: {rate:9.0f} deliveries/s, sender CPU {cpu_us:6.1f} µs/delivery,"
                    f" {conns} connection(s)  (load average before: {load:.2f})"
                )
        finally:
            stop.set()
            proc.join(30)
            if proc.is_alive():
                proc.kill()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--deliveries", type=int, default=20_000)
    p.add_argument("--in-flight", type=int, default=100)
    p.add_argument(
        "--http2",
        action="store_true",
        help="instead: HttpSender over TLS, HTTP/1.1 keep-alive against negotiated HTTP/2",
    )
    args = p.parse_args()
    if args.http2:
        compare_http2(args)
        return
    server, port = _serve()
    delivery = _delivery(f"http://127.0.0.1:{port}/hook")
    makers: dict[str, Callable[[], EndpointSender]] = {
        "fast (production)": HttpSender,
        "aiohttp": AiohttpSender,
        "httpx": HttpxSender,
    }
    rates = {
        name: asyncio.run(_run(make(), delivery, args.deliveries, args.in_flight))
        for name, make in makers.items()
    }
    base = rates["fast (production)"]
    for name, rate in rates.items():
        print(f"{name:>20}: {rate:9.0f} deliveries/s  ({rate / base:.2f} x fast)")
    server.should_exit = True


if __name__ == "__main__":
    main()

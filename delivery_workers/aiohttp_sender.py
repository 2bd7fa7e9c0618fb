"""An :class:`~delivery_workers.sender.EndpointSender` on aiohttp, for throughput.

httpx spends most of a small request in its connection pool (httpcore): one worker process
tops out at a few hundred sends per second with a hundred in flight. aiohttp's client does the
same work for a fraction of the CPU, so this sender is the one to run where a worker must push
thousands of deliveries per second. It sends the same request (:func:`.sender.build_request`)
and classifies the same way (:class:`.result.DeliveryResult`) as :class:`.sender.HttpxSender`.

aiohttp writes header values as UTF-8 text and cannot send a carried header whose bytes are
not ASCII (HTTP's obs-text, which httpbus keeps byte for byte), nor refuse a header name that
is not a token as httpx does. Such a delivery (rare: a producer sent it so) goes through an
:class:`.sender.HttpxSender` made on first need (with a pool of its own, of the same size), so
every delivery behaves exactly as with httpx: sent byte for byte, or rejected for the same
reason. aiohttp speaks HTTP/1.1 only; use :class:`.sender.HttpxSender` for HTTP/2.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from functools import lru_cache

import aiohttp
from yarl import URL

from core.lifecycle import AsyncResource
from core.result import DeliveryResult, ErrorKind

from .sender import MAX_RESPONSE_BYTES, Delivery, HttpxSender, OutgoingRequest, build_request

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


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
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
                body = await _read_capped(response)
        except Exception as exc:
            return _failure(exc, time.perf_counter() - started)
        return DeliveryResult.from_response(
            response.status,
            response.headers,
            time.perf_counter() - started,
            body=body,
            now=self._clock(),
        )

    async def _send_with_httpx(self, delivery: Delivery) -> DeliveryResult:
        if self._fallback is None:
            self._fallback = HttpxSender(
                max_connections=self._max_connections,
                keepalive_expiry=self._keepalive_expiry,
                clock=self._clock,
            )
        return await self._fallback.send(delivery)

"""Every byte a receiver sends is bounded (issue 38): against a real local TCP endpoint that
answers as an attacker would (a 50 MB header streamed, ten thousand headers, an endless
status line, a head over its limit, a 1xx flood, a ``101`` upgrade, a head or body at one
byte a second, an endless trailer, a TLS handshake that never ends), each attempt fails as
``invalid_response`` or a timeout within its limits, the sender reads no further, and the
event loop stays free: a task ticking every millisecond never waits 100 ms, and another
project's deliveries on the same sender keep going."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from core.model import RetryPolicy
from core.result import DeliveryResult, ErrorKind
from core.retry import retries
from delivery_workers.answer_limits import AnswerLimits
from delivery_workers.http_sender import HttpSender
from tests.support.hook import serve_hook
from tests.support.hostile import MB, Answer, Chunk, LoopWatch, hostile_endpoint, repeated
from tests.support.senders import delivery_to

LIMITS = AnswerLimits(head_timeout_s=0.5, body_timeout_s=0.5, connect_timeout_s=0.5)
OK_HEAD = b"HTTP/1.1 200 OK\r\n"
UPGRADE = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"


def _dribble(first: bytes) -> Iterator[Chunk]:
    yield first
    for _ in range(30):
        yield b"x"
        yield 1.0


def _big_head() -> Iterator[Chunk]:
    yield OK_HEAD + b"".join(b"X-H%d: %s\r\n" % (n, b"v" * 1000) for n in range(80))
    yield 30.0  # and nothing more


@dataclass(frozen=True)
class Hostile:
    answer: Answer
    kind: ErrorKind
    error: str  # a fragment of the attempt's error
    within_s: float = 1.0


HOSTILE = {
    "a 50 MB header": Hostile(
        lambda: repeated(OK_HEAD + b"X-Big: ", b"a", 50 * MB),
        ErrorKind.INVALID_RESPONSE,
        "a header line over 16384 bytes",
    ),
    "ten thousand headers": Hostile(
        lambda: repeated(OK_HEAD, b"X-A: 1\r\n", 10_000 * 8),
        ErrorKind.INVALID_RESPONSE,
        "more than 100 headers",
    ),
    "an endless status line": Hostile(
        lambda: repeated(b"HTTP/1.1 200 ", b"O", 50 * MB),
        ErrorKind.INVALID_RESPONSE,
        "a status line over 8192 bytes",
    ),
    "a head over 64 KiB": Hostile(_big_head, ErrorKind.INVALID_RESPONSE, "a head over 65536"),
    "a 1xx flood": Hostile(
        lambda: repeated(b"", b"HTTP/1.1 102 Processing\r\n\r\n", 50 * MB),
        ErrorKind.INVALID_RESPONSE,
        "more than 16 interim 1xx answers",
    ),
    "a 101 upgrade": Hostile(
        lambda: repeated(UPGRADE, b"\x81\x05hello", 50 * MB),
        ErrorKind.INVALID_RESPONSE,
        "101 Switching Protocols",
    ),
    "a head at a byte a second": Hostile(
        lambda: _dribble(OK_HEAD), ErrorKind.TIMEOUT, "(HeadTimeout)", within_s=1.5
    ),
    "a body at a byte a second": Hostile(
        lambda: _dribble(OK_HEAD + b"Content-Length: 100\r\n\r\n"),
        ErrorKind.TIMEOUT,
        "(BodyTimeout)",
        within_s=1.5,
    ),
}


async def _steady(sender: HttpSender, url: str, stop: asyncio.Event) -> list[float]:
    """Another project's deliveries, one every 10 ms until ``stop``: their latencies."""
    latencies = []
    while not stop.is_set():
        started = time.perf_counter()
        result = await sender.send(delivery_to(url, name="other"))
        assert result.succeeded, result
        latencies.append(time.perf_counter() - started)
        await asyncio.sleep(0.01)
    return latencies


async def _attempt_beside_others(answer: Answer) -> tuple[DeliveryResult, float, float, int]:
    """One attempt to a hostile endpoint while another project's deliveries go on: its
    result, how long it took, the loop's longest gap, the bytes the endpoint wrote."""
    async with serve_hook() as hook, hostile_endpoint(answer) as endpoint:
        async with HttpSender(limits=LIMITS) as sender, LoopWatch() as watch:
            stop = asyncio.Event()
            others = asyncio.create_task(_steady(sender, hook.url_for("other"), stop))
            started = time.perf_counter()
            result = await sender.send(delivery_to(endpoint.url, timeout_ms=10_000))
            took = time.perf_counter() - started
            await asyncio.sleep(0.05)
            stop.set()
            latencies = await others
        assert latencies and max(latencies) < 0.5, latencies
        return result, took, watch.max_gap_s, endpoint.written


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
async def test_a_hostile_answer_fails_the_attempt_and_never_holds_the_loop(case: Hostile) -> None:
    result, took, max_gap_s, written = await _attempt_beside_others(case.answer)
    assert result.error_kind is case.kind, result
    assert case.error in (result.error or ""), result.error
    assert retries(RetryPolicy(), result)  # the policy decides, as for a lost connection
    assert took < case.within_s, f"refused after {took:.3f} s"
    assert max_gap_s < 0.1, f"the loop was held {max_gap_s * 1000:.0f} ms"
    assert written < 16 * MB  # read no further: the endpoint could not write its 50 MB


async def test_an_endless_trailer_or_tiny_chunks_end_with_the_answer_read_so_far() -> None:
    chunked = OK_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    for answer in (
        lambda: repeated(chunked + b"0\r\nX-Trailer: ", b"t", 50 * MB),
        lambda: repeated(chunked, b"1\r\nx\r\n", 50 * MB),
    ):
        result, took, max_gap_s, written = await _attempt_beside_others(answer)
        assert result.succeeded and result.status == 200, result
        assert took < 1.0 and max_gap_s < 0.1 and written < 16 * MB


async def test_a_stalled_tls_handshake_is_a_connect_timeout() -> None:
    async with hostile_endpoint(lambda: iter([])) as endpoint:  # reads a head that never ends
        url = endpoint.url.replace("http://", "https://")
        async with HttpSender(limits=LIMITS) as sender:
            started = time.perf_counter()
            result = await sender.send(delivery_to(url, timeout_ms=10_000))
            took = time.perf_counter() - started
    assert result.error_kind is ErrorKind.TIMEOUT and "(ConnectTimeout)" in (result.error or "")
    assert took < 1.5


def _sender_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("delivery_workers", "asyncio"))]


async def test_upgrades_are_logged_once_a_minute_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    async with hostile_endpoint(lambda: iter([UPGRADE, 30.0])) as endpoint:
        async with HttpSender(limits=LIMITS) as sender:
            results = [await sender.send(delivery_to(endpoint.url)) for _ in range(5)]
    assert {r.error_kind for r in results} == {ErrorKind.INVALID_RESPONSE}
    lines = _sender_lines(caplog)
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert lines[0].exc_info is None and "101 Switching Protocols" in lines[0].getMessage()


async def test_a_tls_answer_that_is_not_tls_is_logged_once_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n" * 100
    async with hostile_endpoint(lambda: iter([plain, 30.0]), read_request=False) as endpoint:
        url = endpoint.url.replace("http://", "https://")
        async with HttpSender(limits=LIMITS, ssl_context=_no_verify()) as sender:
            results = [await sender.send(delivery_to(url)) for _ in range(3)]
    assert {r.error_kind for r in results} == {ErrorKind.CONNECTION}, results
    assert "SSL" in (results[0].error or "")
    lines = _sender_lines(caplog)
    assert len(lines) == 1 and lines[0].exc_info is None, [r.getMessage() for r in lines]


def _no_verify() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context

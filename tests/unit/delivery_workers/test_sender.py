"""The sender contract against a real endpoint: uvicorn on 127.0.0.1 in a thread, real sockets,
no mock. The endpoint records every request and answers as each test scripts it. The worker
runs one sender, :class:`HttpSender` (the ``sender`` fixture makes them); the aiohttp and httpx
senders are comparisons in ``bench/senders.py``."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from core.model import Endpoint, RetryPolicy, Subscription
from core.result import DeliveryResult, ErrorKind
from core.retry import retries
from core.signing import sign, verify
from delivery_workers.http_sender import HttpSender
from delivery_workers.sender import Delivery, EndpointSender, batch_entry, build_request
from segments.protocol import Stored
from tests.support.uvicorn_thread import uvicorn_thread

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
PRODUCED_MS = 1614265330123  # 2021-02-25T15:02:10.123Z


@dataclass
class Script:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    body: bytes = b""
    body_delay: float = 0.0  # between the status line and the body


@dataclass
class Seen:
    method: str
    path: str
    headers: list[tuple[bytes, bytes]]
    body: bytes
    client: tuple[str, int]

    def header(self, name: str) -> str | None:
        found = [v for k, v in self.headers if k == name.lower().encode()]
        assert len(found) <= 1, f"{name} sent {len(found)} times"
        return found[0].decode("latin-1") if found else None


class Recorder:
    """A raw ASGI app: answers each path as scripted, records what arrived."""

    def __init__(self) -> None:
        self.scripts: dict[str, Script] = {}
        self.seen: list[Seen] = []
        self.lock = threading.Lock()
        self.port = 0

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests(self, path: str) -> list[Seen]:
        with self.lock:
            return [s for s in self.seen if s.path == path]

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        seen = Seen(scope["method"], scope["path"], list(scope["headers"]), body, scope["client"])
        with self.lock:
            self.seen.append(seen)
        script = self.scripts.get(scope["path"], Script())
        if script.delay:
            await asyncio.sleep(script.delay)
        headers = [(k.encode(), v.encode()) for k, v in script.headers.items()]
        await send({"type": "http.response.start", "status": script.status, "headers": headers})
        if script.body_delay:
            await send({"type": "http.response.body", "body": script.body[:1], "more_body": True})
            await asyncio.sleep(script.body_delay)
            await send({"type": "http.response.body", "body": script.body[1:]})
            return
        await send({"type": "http.response.body", "body": script.body})


@pytest.fixture(scope="module")
def endpoint() -> Iterator[Recorder]:
    app = Recorder()
    with uvicorn_thread(app, http="h11", backlog=2048) as port:
        app.port = port
        yield app


class SenderKind:
    """Makes senders of the worker's implementation."""

    def __call__(self, **options: Any) -> HttpSender:
        return HttpSender(**options)

    connect_error = "ConnectionRefusedError"  # the error of a refused connection


@pytest.fixture
def sender() -> SenderKind:
    return SenderKind()


def _path() -> str:
    return f"/hook/{uuid.uuid4().hex[:10]}"


def _subscription(url: str, **endpoint: Any) -> Subscription:
    retry_4xx = endpoint.pop("retry_4xx", False)
    return Subscription(
        project="shop",
        name="billing",
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url=url, **endpoint),
        retry=RetryPolicy(retry_4xx=retry_4xx),
        signing_secret=SECRET,
    )


def _stored(value: bytes = b'{"order": 1}', *extra: tuple[str, bytes]) -> Stored:
    headers = (
        ("x-message-id", b"01JD3ZK6Q7M2X9C4V8B1N5R0TT"),
        ("x-produced-at", str(PRODUCED_MS).encode()),
        *extra,
    )
    return Stored(
        partition=1, position=42, timestamp_ms=PRODUCED_MS + 5, value=value, headers=headers
    )


def _delivery(url: str, *, attempt: int = 1, **endpoint: Any) -> Delivery:
    return Delivery(_subscription(url, **endpoint), "shop/orders", _stored(), attempt)


# --- build_request: pure ---------------------------------------------------------------------


def test_build_request_carries_the_message_and_signs_it() -> None:
    payload = bytes(range(256))
    stored = _stored(
        payload,
        ("x-group-id", b"customer-7"),
        ("x-deliver-at", b"1614265399000"),
        ("content-type", b"application/vnd.order+json; charset=utf-8"),
        ("x-trace-id", b"abc-123"),
        ("x-latin", "café".encode("latin-1")),
    )
    sub = _subscription("http://hooks.example/in?x=1", method="PUT", headers={"Authorization": "k"})
    method, url, headers, body = build_request(
        Delivery(sub, "shop/orders", stored, 3), 1_700_000_000
    )
    sent = dict(headers)
    assert (method, url, body) == ("PUT", "http://hooks.example/in?x=1", payload)
    assert sent == {
        "User-Agent": "httpbus",
        "Accept-Encoding": "identity",
        "x-trace-id": "abc-123",
        "x-latin": "café",
        "Authorization": "k",
        "Content-Type": "application/vnd.order+json; charset=utf-8",
        "X-Message-Id": "01JD3ZK6Q7M2X9C4V8B1N5R0TT",
        "X-Group-Id": "customer-7",
        "X-Topic": "shop/orders",
        "X-Produced-At": "2021-02-25T15:02:10.123Z",
        "X-Attempt": "3",
        "webhook-id": "01JD3ZK6Q7M2X9C4V8B1N5R0TT",
        "webhook-timestamp": "1700000000",
        "webhook-signature": sign(SECRET, "01JD3ZK6Q7M2X9C4V8B1N5R0TT", 1_700_000_000, payload),
    }
    assert len(headers) == len(sent)
    assert verify(SECRET, sent, payload, now=1_700_000_000)


def test_a_replayed_message_is_marked_x_replay_and_no_other_is() -> None:
    sub = _subscription("http://h:81")
    replayed = _stored(b"x", ("x-replay", b"true"), ("x-group-id", b"g"))
    _, _, headers, _ = build_request(Delivery(sub, "p/t", replayed), 5)
    assert dict(headers)["X-Replay"] == "true"
    assert [n for n, _ in headers].count("X-Replay") == 1  # not also carried as x-replay
    _, _, plain, _ = build_request(Delivery(sub, "p/t", _stored(b"x")), 5)
    assert "X-Replay" not in dict(plain) and "x-replay" not in dict(plain)
    assert batch_entry("p/t", replayed, 1)["headers"] == {"x-replay": "true"}


def test_build_request_defaults() -> None:
    stored = Stored(partition=2, position=9, timestamp_ms=PRODUCED_MS, value=b"")
    _, url, headers, body = build_request(Delivery(_subscription("http://h:81"), "p/t", stored), 5)
    sent = dict(headers)
    assert url == "http://h:81/" and body == b""
    assert sent["Content-Type"] == "application/octet-stream"
    assert "X-Group-Id" not in sent
    assert sent["X-Attempt"] == "1"
    assert sent["X-Produced-At"] == "2021-02-25T15:02:10.123Z"  # the store's timestamp
    assert sent["X-Message-Id"] == sent["webhook-id"] == "p/t/2/9"  # stable across attempts


def test_precedence_carried_then_static_then_our_own() -> None:
    stored = _stored(
        b"x",
        ("x-topic", b"forged"),
        ("x-attempt", b"99"),
        ("x-batch-size", b"1000"),  # stored before the producer dropped it: never sent
        ("x-tenant", b"from-producer"),
        ("x-other", b"kept"),
    )
    static = {
        "X-Tenant": "from-operator",
        "X-Message-Id": "forged",
        "Webhook-Signature": "v1,forged",
        "Content-Length": "1",
        "Host": "evil",
        "User-Agent": "acme-relay",
    }
    _, _, headers, _ = build_request(
        Delivery(_subscription("http://h/", headers=static), "p/t", stored, 2), 7
    )
    lower = {name.lower(): value for name, value in headers}
    assert len(lower) == len(headers), "a header name is sent twice"
    assert lower["x-topic"] == "p/t" and lower["x-attempt"] == "2"
    assert lower["x-tenant"] == "from-operator" and lower["x-other"] == "kept"
    assert lower["x-message-id"] == "01JD3ZK6Q7M2X9C4V8B1N5R0TT"
    assert lower["webhook-signature"] == sign(SECRET, "01JD3ZK6Q7M2X9C4V8B1N5R0TT", 7, b"x")
    assert lower["user-agent"] == "acme-relay"
    assert "content-length" not in lower and "host" not in lower
    assert "x-batch-size" not in lower


# --- each sender against a real endpoint ----------------------------------------------------


async def test_payload_and_headers_arrive_exactly_as_built(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    payload = b"\x00\x01binary\r\n\xff" * 100
    stored = _stored(payload, ("content-type", b"application/x-thing"), ("x-latin", b"caf\xe9"))
    delivery = Delivery(
        _subscription(endpoint.url(path) + "?q=1", method="PUT", headers={"X-Key": "s3cr3t"}),
        "shop/orders",
        stored,
        2,
    )
    async with sender(clock=lambda: 1_700_000_000.0) as s:
        assert isinstance(s, EndpointSender)
        result = await s.send(delivery)
    assert result.succeeded and result.status == 200 and result.latency_s > 0
    [seen] = endpoint.requests(path)
    assert (seen.method, seen.body) == ("PUT", payload)
    _, _, built, _ = build_request(delivery, 1_700_000_000)
    for name, value in built:
        assert seen.header(name) == value, name
    assert seen.header("content-length") == str(len(payload))
    received = {k.decode("latin-1"): v.decode("latin-1") for k, v in seen.headers}
    assert verify(SECRET, received, seen.body, now=1_700_000_000)
    assert not verify(SECRET, received, seen.body + b"!", now=1_700_000_000)


async def test_ascii_headers_arrive_exactly_as_built(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    stored = _stored(b"", ("x-trace-id", b"a b\tc"), ("x-empty", b""))
    delivery = Delivery(_subscription(endpoint.url(path)), "shop/orders", stored)
    async with sender(clock=lambda: 1_700_000_000.0) as s:
        assert (await s.send(delivery)).succeeded
    [seen] = endpoint.requests(path)
    assert (seen.method, seen.body) == ("POST", b"")
    _, _, built, _ = build_request(delivery, 1_700_000_000)
    for name, value in built:
        assert seen.header(name) == value, name
    assert seen.header("content-length") == "0"
    assert seen.header("x-empty") == ""


async def test_the_signature_is_made_when_sent(endpoint: Recorder, sender: SenderKind) -> None:
    path = _path()
    async with sender() as s:
        assert (await s.send(_delivery(endpoint.url(path)))).succeeded
    [seen] = endpoint.requests(path)
    received = {k.decode(): v.decode() for k, v in seen.headers}
    assert abs(int(received["webhook-timestamp"]) - time.time()) < 5
    assert verify(SECRET, received, seen.body)


@pytest.mark.parametrize("status", [200, 204])
async def test_2xx_is_delivered(endpoint: Recorder, sender: SenderKind, status: int) -> None:
    path = _path()
    endpoint.scripts[path] = Script(status)
    async with sender() as s:
        result = await s.send(_delivery(endpoint.url(path)))
    assert result.succeeded and result.status == status


async def test_503_with_retry_after_is_retryable_after_that_long(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    endpoint.scripts[path] = Script(503, {"Retry-After": "3"}, body=b"down for maintenance")
    async with sender() as s:
        result = await s.send(_delivery(endpoint.url(path)))
    assert retries(RetryPolicy(), result) and result.status == 503 and result.retry_after == 3
    assert result.error == "HTTP 503: down for maintenance"


async def test_429_without_retry_after_is_retryable(endpoint: Recorder, sender: SenderKind) -> None:
    path = _path()
    endpoint.scripts[path] = Script(429)
    async with sender() as s:
        result = await s.send(_delivery(endpoint.url(path)))
    assert retries(RetryPolicy(), result) and result.status == 429 and result.retry_after is None


async def test_400_is_rejected_unless_the_policy_retries_4xx(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    endpoint.scripts[path] = Script(400, body=b'{"error": "unknown order"}')
    async with sender() as s:
        rejected = await s.send(_delivery(endpoint.url(path)))
        retried = await s.send(_delivery(endpoint.url(path), retry_4xx=True))
    assert not retries(RetryPolicy(), rejected) and rejected.status == 400
    assert rejected.error == 'HTTP 400: {"error": "unknown order"}'
    assert retries(RetryPolicy(retry_4xx=True), retried) and retried.status == 400
    assert len(endpoint.requests(path)) == 2


async def test_301_is_rejected_and_not_followed(endpoint: Recorder, sender: SenderKind) -> None:
    path, elsewhere = _path(), _path()
    endpoint.scripts[path] = Script(301, {"Location": endpoint.url(elsewhere)})
    async with sender() as s:
        result = await s.send(_delivery(endpoint.url(path)))
    assert not retries(RetryPolicy(), result) and result.status == 301
    assert result.error is not None and endpoint.url(elsewhere) in result.error
    assert len(endpoint.requests(path)) == 1
    assert endpoint.requests(elsewhere) == []


async def test_only_the_start_of_a_huge_answer_is_read(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    endpoint.scripts[path] = Script(500, body=b"e" * 1_000_000)
    async with sender() as s:
        result = await s.send(_delivery(endpoint.url(path)))
        again = await s.send(_delivery(endpoint.url(path)))
    assert retries(RetryPolicy(), result) and result.status == 500
    assert result.error == "HTTP 500: " + "e" * 200
    assert retries(RetryPolicy(), again) and again.status == 500, (
        "the half-read connection was reused"
    )
    first, second = endpoint.requests(path)
    assert first.client != second.client


async def _timed_send(s: EndpointSender, url: str) -> tuple[DeliveryResult, float]:
    """A send to ``url`` with a 300 ms timeout: its result and how long it took."""
    started = time.monotonic()
    result = await s.send(_delivery(url, timeout_ms=300))
    return result, time.monotonic() - started


def _timed_out_retryably(result: DeliveryResult, elapsed: float) -> None:
    """A retryable timeout of the 300 ms budget, reached in time and not much later."""
    assert retries(RetryPolicy(), result) and result.status is None
    assert result.error is not None and result.error.startswith("timeout after")
    assert 0.3 <= elapsed < 0.8


async def test_a_slow_endpoint_times_out_retryably(endpoint: Recorder, sender: SenderKind) -> None:
    path = _path()
    endpoint.scripts[path] = Script(delay=3.0)
    async with sender() as s:
        result, elapsed = await _timed_send(s, endpoint.url(path))
    _timed_out_retryably(result, elapsed)
    assert len(endpoint.requests(path)) == 1


async def test_a_slow_answer_body_counts_in_the_timeout(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    endpoint.scripts[path] = Script(500, body=b"oops, slowly", body_delay=3.0)
    async with sender() as s:
        result, elapsed = await _timed_send(s, endpoint.url(path))
    _timed_out_retryably(result, elapsed)


async def test_waiting_for_a_pooled_connection_counts_in_the_timeout(
    endpoint: Recorder, sender: SenderKind
) -> None:
    slow, queued = _path(), _path()
    endpoint.scripts[slow] = Script(delay=1.5)
    async with sender(max_connections=1) as s:
        holder = asyncio.create_task(s.send(_delivery(endpoint.url(slow), timeout_ms=5_000)))
        await asyncio.sleep(0.2)  # the only connection is taken
        result, elapsed = await _timed_send(s, endpoint.url(queued))
        assert (await holder).succeeded
    _timed_out_retryably(result, elapsed)
    assert endpoint.requests(queued) == []


async def test_a_closed_port_is_a_retryable_connection_error(sender: SenderKind) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with sender() as s:
        result = await s.send(_delivery(f"http://127.0.0.1:{port}/hook"))
    assert retries(RetryPolicy(), result) and result.status is None
    assert result.error is not None
    assert result.error.startswith(f"connection error: {sender.connect_error}")


async def test_a_secret_that_cannot_sign_is_rejected_without_a_request(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    delivery = _delivery(endpoint.url(path))
    bad = delivery.subscription.model_copy(update={"signing_secret": "whsec_not base64 at all!"})
    async with sender() as s:
        result = await s.send(Delivery(bad, "shop/orders", delivery.message))
    assert result.error_kind is ErrorKind.INVALID_REQUEST
    assert result.error is not None and "whsec_" in result.error
    assert endpoint.requests(path) == []


@pytest.mark.parametrize(
    ("name", "value", "refused"),
    [
        ("X-Split", "a\r\nX-Injected: 1", "Illegal header value"),
        ("X-Padded", " a", "Illegal header value"),
        ("X Spaced", "a", "Illegal header name"),
    ],
)
async def test_a_header_the_client_refuses_is_rejected_without_a_request(
    endpoint: Recorder, sender: SenderKind, name: str, value: str, refused: str
) -> None:
    path = _path()
    async with sender() as s:
        result = await s.send(_delivery(endpoint.url(path), headers={name: value}))
    assert result.error_kind is ErrorKind.INVALID_REQUEST and result.status is None
    assert result.error is not None and result.error.startswith("invalid request: ")
    assert refused in result.error
    assert endpoint.requests(path) == []


async def test_concurrent_sends_share_a_bounded_pool_of_kept_alive_connections(
    endpoint: Recorder, sender: SenderKind
) -> None:
    path = _path()
    endpoint.scripts[path] = Script(delay=0.02)
    async with sender(max_connections=10) as s:
        first = await asyncio.gather(*(s.send(_delivery(endpoint.url(path))) for _ in range(200)))
        after_first = {seen.client for seen in endpoint.requests(path)}
        second = await asyncio.gather(*(s.send(_delivery(endpoint.url(path))) for _ in range(200)))
    assert all(r.succeeded for r in first + second)
    connections = {seen.client for seen in endpoint.requests(path)}
    assert len(endpoint.requests(path)) == 400
    assert 1 <= len(after_first) <= 10
    assert connections == after_first, "the second wave opened new connections"

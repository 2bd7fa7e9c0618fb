"""HTTP/2 in :class:`HttpSender`, only where it is negotiated: against an HTTPS endpoint that
offers h2 through ALPN many deliveries share one connection; against one that offers only
HTTP/1.1, or with ``http2`` off, the sender speaks HTTP/1.1; a stream the endpoint refused is
sent again; a timed-out stream is cancelled without losing the connection."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.result import ErrorKind
from delivery_workers.http_sender import HttpSender
from delivery_workers.sender import Delivery
from tests.support.h2_endpoint import H2Endpoint, make_certificate
from tests.support.senders import delivery_to


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@pytest.fixture
async def endpoints() -> AsyncIterator[list[H2Endpoint]]:
    started: list[H2Endpoint] = []
    yield started
    for endpoint in started:
        await endpoint.aclose()


def _trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


async def _started(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint], **options: object
) -> H2Endpoint:
    """An endpoint of ``certificate`` with ``options``, closed with the ``endpoints`` fixture."""
    endpoint = await H2Endpoint.start(*certificate, **options)  # type: ignore[arg-type]
    endpoints.append(endpoint)
    return endpoint


def _h2_sender(certificate: tuple[Path, Path]) -> HttpSender:
    """A sender that trusts ``certificate`` and offers HTTP/2."""
    return HttpSender(ssl_context=_trusting(certificate[0]), http2=True)


def _delivery(url: str, timeout_ms: int = 5_000, body: bytes = b'{"n": 1}') -> Delivery:
    headers = (("content-type", b"application/json"), ("x-tenant", b"acme"))
    return delivery_to(url, timeout_ms, value=body, headers=headers)


async def test_many_deliveries_share_one_negotiated_h2_connection(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, status=202, body=b"ok")
    async with _h2_sender(certificate) as sender:
        results = await asyncio.gather(*(sender.send(_delivery(endpoint.url)) for _ in range(50)))
        assert sender.pool.open_connections == 1
    assert all(r.succeeded and r.status == 202 for r in results)
    assert endpoint.protocols_seen == ["h2"] and len(endpoint.requests) == 50
    protocol, _, head = endpoint.requests[0]
    assert protocol == "h2"
    assert head[":method"] == "POST" and head[":path"] == "/hook"
    assert head[":authority"] == f"localhost:{endpoint.url.split(':')[2].split('/')[0]}"
    assert head["x-tenant"] == "acme" and head["content-type"] == "application/json"
    assert head["webhook-id"] and head["content-length"] == str(len(b'{"n": 1}'))
    assert "host" not in head


async def test_an_endpoint_without_h2_gets_http1(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, protocols=("http/1.1",), status=204)
    async with _h2_sender(certificate) as sender:
        results = [await sender.send(_delivery(endpoint.url)) for _ in range(3)]
    assert all(r.succeeded for r in results)
    assert endpoint.protocols_seen == ["http/1.1"]
    assert [p for p, _, _ in endpoint.requests] == ["http/1.1"] * 3


async def test_with_http2_off_h2_is_never_offered(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, status=204)
    async with HttpSender(ssl_context=_trusting(certificate[0])) as sender:
        assert (await sender.send(_delivery(endpoint.url))).succeeded
    assert endpoint.protocols_seen == ["http/1.1"]


async def test_a_refused_stream_is_sent_again_and_delivered_once(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, status=200, refuse_first=1)
    async with _h2_sender(certificate) as sender:
        first = await sender.send(_delivery(endpoint.url))  # opens the connection: not resent
        second = await sender.send(_delivery(endpoint.url))
    assert not first.succeeded and first.error is not None and "REFUSED_STREAM" in first.error
    assert second.succeeded and len(endpoint.requests) == 1


async def test_a_timed_out_stream_is_cancelled_and_the_connection_kept(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, status=200)
    async with _h2_sender(certificate) as sender:
        assert (await sender.send(_delivery(endpoint.url))).succeeded
        endpoint.refuse_first = 0
        original = endpoint._answer
        endpoint._answer = lambda *args: None  # type: ignore[method-assign]  # never answers
        late = await sender.send(_delivery(endpoint.url, timeout_ms=200))
        endpoint._answer = original  # type: ignore[method-assign]
        again = await sender.send(_delivery(endpoint.url))
        assert sender.pool.open_connections == 1
    assert not late.succeeded and late.error is not None and "timeout" in late.error
    assert again.succeeded and endpoint.connections == 1


async def test_a_body_larger_than_the_flow_control_window_is_sent_whole(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, status=200)
    body = b"x" * 300_000  # the initial window is 65,535 bytes
    async with _h2_sender(certificate) as sender:
        result = await sender.send(_delivery(endpoint.url, body=body))
    assert result.succeeded
    assert endpoint.requests[0][2]["content-length"] == str(len(body))


def test_the_worker_setting_turns_http2_on_and_it_is_off_by_default() -> None:
    from delivery_workers.http_sender import make_sender
    from delivery_workers.settings import WorkerSettings

    assert make_sender(WorkerSettings(http2=True)).pool.http2
    assert not make_sender(WorkerSettings()).pool.http2


async def test_past_the_endpoints_stream_limit_more_connections_carry_the_rest(
    certificate: tuple[Path, Path], endpoints: list[H2Endpoint]
) -> None:
    endpoint = await _started(certificate, endpoints, status=200, max_streams=2)
    async with _h2_sender(certificate) as sender:
        assert (await sender.send(_delivery(endpoint.url))).succeeded  # SETTINGS are known
        results = await asyncio.gather(*(sender.send(_delivery(endpoint.url)) for _ in range(12)))
    assert all(r.succeeded for r in results), [r.error for r in results if not r.succeeded]
    assert set(endpoint.protocols_seen) == {"h2"} and endpoint.connections >= 2


@pytest.mark.parametrize(
    ("options", "refusal"),
    [
        ({"extra_headers": [(f"x-h{n}", "v") for n in range(150)]}, "more than 100 headers"),
        ({"extra_headers": [("x-big", "v" * 20_000)]}, "a header line over 16384 bytes"),
        ({"interim": 20}, "more than 16 interim 1xx answers"),
    ],
    ids=["150 headers", "a 20 KB header", "20 interim answers"],
)
async def test_an_h2_answer_over_a_limit_is_an_invalid_response(
    certificate: tuple[Path, Path],
    endpoints: list[H2Endpoint],
    options: dict[str, object],
    refusal: str,
) -> None:
    endpoint = await _started(certificate, endpoints, **options)
    async with _h2_sender(certificate) as sender:
        result = await sender.send(_delivery(endpoint.url))
    assert endpoint.protocols_seen == ["h2"]
    assert result.error_kind is ErrorKind.INVALID_RESPONSE, result
    assert refusal in (result.error or "")

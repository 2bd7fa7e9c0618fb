"""A kept-alive connection that fails under a request (the broker closed it as it was reused,
or httpcore's pool closed it after handing it out: encode/httpcore#1110, a ``ReadError`` from
anyio's ``ClosedResourceError``, reproduced with a pool shared by concurrent requests): a read
is sent once more; a change, which may have been applied, is not."""

from __future__ import annotations

import httpx
import pytest

from core.errors import StorageUnavailable
from segments.pulsar.admin import PulsarAdmin


def _flaky(failures: int, seen: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.method)
        if len(seen) <= failures:
            raise httpx.ReadError("", request=request)
        return httpx.Response(200 if request.method == "GET" else 204, json={"partitions": 4})

    return httpx.MockTransport(answer)


def _admin(http: httpx.AsyncClient) -> PulsarAdmin:
    return PulsarAdmin("http://127.0.0.1:8080", tenant="t", namespace="n", timeout_s=5, http=http)


async def test_a_read_failed_on_its_connection_is_sent_again() -> None:
    seen: list[str] = []
    async with httpx.AsyncClient(transport=_flaky(1, seen)) as http:
        assert await _admin(http).partition_count("orders") == 4
    assert seen == ["GET", "GET"]


async def test_a_read_is_sent_again_once_only() -> None:
    seen: list[str] = []
    async with httpx.AsyncClient(transport=_flaky(2, seen)) as http:
        with pytest.raises(StorageUnavailable):
            await _admin(http).partition_count("orders")
    assert seen == ["GET", "GET"]


async def test_a_change_is_not_sent_again() -> None:
    seen: list[str] = []
    async with httpx.AsyncClient(transport=_flaky(1, seen)) as http:
        with pytest.raises(StorageUnavailable):
            await _admin(http).create_partitioned_topic("orders", 4)
    assert seen == ["PUT"]

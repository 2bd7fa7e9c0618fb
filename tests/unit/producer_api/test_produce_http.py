"""The produce routes over raw sockets, served as the service serves them (uvicorn's protocol
with core/http_server.py's limits): what a client sees that the ASGI app alone never shows
(keep-alive, pipelining, ``Expect: 100-continue``, HTTP/1.0, a client gone mid-body, a slow
body, requests the parser refuses, answered as JSON with our codes)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.http_server import HttpServerLimits
from tests.support.producer import ADMIN, ProducerEnv, produce_url, producer_env, serve_http

AUTH = f"Authorization: Bearer {ADMIN}\r\n".encode()


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[ProducerEnv]:
    async with producer_env(tmp_path, {"orders": {}}, "asgi") as found:
        yield found


@pytest.fixture
async def port(env: ProducerEnv) -> AsyncIterator[int]:
    async with serve_http(env.app, HttpServerLimits(body_timeout_s=0.5)) as found:
        yield found


def _produce(body: bytes, *extra: bytes, url: str = produce_url("orders")) -> bytes:
    head = [f"POST {url} HTTP/1.1\r\nHost: p\r\n".encode(), AUTH, *extra]
    head.append(f"Content-Length: {len(body)}\r\n\r\n".encode())
    return b"".join(head) + body


Answer = tuple[int, bytes, dict[str, Any]]


async def _answers(reader: asyncio.StreamReader, count: int) -> list[Answer]:
    """``count`` answers: status, head and JSON body (each read to its Content-Length)."""
    found: list[Answer] = []
    for _ in range(count):
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        status = int(head.split(b" ", 2)[1])
        if status == 100:
            found.append((status, head, {}))
            continue
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        body = await asyncio.wait_for(reader.readexactly(length), 5)
        found.append((status, head, json.loads(body)))
    return found


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    await writer.wait_closed()


async def _connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port)


async def test_two_produces_on_one_kept_alive_connection(env: ProducerEnv, port: int) -> None:
    reader, writer = await _connect(port)
    writer.write(_produce(b"one") + _produce(b"two"))
    [(s1, head, first), (s2, _, second)] = await _answers(reader, 2)
    assert (s1, s2) == (201, 201) and first["message_id"] != second["message_id"]
    assert b"x-message-id: " in head.lower()
    assert b"connection: close" not in head.lower()
    await _close(writer)
    assert sorted(m.value for m in await env.stored("orders")) == [b"one", b"two"]


async def test_pipelined_produce_and_other_requests_answer_in_order(
    env: ProducerEnv, port: int
) -> None:
    reader, writer = await _connect(port)
    health = b"GET /healthz HTTP/1.1\r\nHost: p\r\n\r\n"
    query = _produce(b"q", url=produce_url("orders") + "?via=asgi")
    writer.write(_produce(b"a") + health + query + _produce(b"b", url=produce_url("nope")))
    statuses = [s for s, _, _ in await _answers(reader, 4)]
    assert statuses == [201, 200, 201, 404]
    await _close(writer)
    assert sorted(m.value for m in await env.stored("orders")) == [b"a", b"q"]


async def test_expect_100_continue_is_answered_before_the_body(env: ProducerEnv, port: int) -> None:
    reader, writer = await _connect(port)
    request = _produce(b"later", b"Expect: 100-continue\r\n")
    head, body = request[: -len(b"later")], b"later"
    writer.write(head)
    [(status, _, _)] = await _answers(reader, 1)
    assert status == 100
    writer.write(body)
    [(status, _, _)] = await _answers(reader, 1)
    assert status == 201
    await _close(writer)


async def test_http_1_0_is_answered_and_closed(port: int) -> None:
    reader, writer = await _connect(port)
    writer.write(_produce(b"old").replace(b"HTTP/1.1", b"HTTP/1.0"))
    [(status, head, _)] = await _answers(reader, 1)
    assert status == 201 and b"connection: close" in head.lower()
    assert await asyncio.wait_for(reader.read(), 5) == b""
    await _close(writer)


async def test_a_client_gone_mid_body_stores_nothing(env: ProducerEnv, port: int) -> None:
    reader, writer = await _connect(port)
    writer.write(_produce(b"x" * 100)[:-60])
    await writer.drain()
    await _close(writer)
    reader2, writer2 = await _connect(port)  # the service goes on
    writer2.write(_produce(b"after"))
    [(status, _, _)] = await _answers(reader2, 1)
    assert status == 201
    await _close(writer2)
    assert [m.value for m in await env.stored("orders")] == [b"after"]


async def test_a_slow_body_is_408_from_the_server(env: ProducerEnv, port: int) -> None:
    reader, writer = await _connect(port)
    writer.write(_produce(b"x" * 100)[:-60])
    [(status, _, body)] = await _answers(reader, 1)
    assert (status, body["code"]) == (408, "request_timeout")
    await _close(writer)
    assert await env.stored("orders") == []


@pytest.mark.parametrize(
    ("header", "fix"),
    [
        (b"X-A: bell\x07\r\n", "control characters"),
        (b"X-A: nul\x00\r\n", "CR, LF, NUL"),
        (b"X A: v\r\n", "not an HTTP token"),
    ],
)
async def test_what_the_parser_refuses_is_a_json_400(
    env: ProducerEnv, port: int, header: bytes, fix: str
) -> None:
    reader, writer = await _connect(port)
    writer.write(_produce(b"p", header))
    [(status, head, body)] = await _answers(reader, 1)
    assert (status, body["code"]) == (400, "malformed") and fix in body["message"]
    assert b"connection: close" in head.lower()
    await _close(writer)
    assert await env.stored("orders") == []

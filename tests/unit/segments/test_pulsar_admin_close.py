"""Closing the Pulsar admin client under calls in flight: each call ends with an httpbus
error, and none goes on after the close (an ``httpx`` client closed under a request that is
connecting lets it go on, and leaves its connection unowned: its socket leaks, as CI caught
once on the admin port). No ``gc.collect()`` here: in the whole suite's heap it takes seconds."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

from core.errors import StorageUnavailable
from segments.pulsar.admin import PulsarAdmin
from tests.support.until import until


@pytest.fixture
async def silent_port() -> AsyncIterator[tuple[int, list[asyncio.StreamReader]]]:
    """A server that reads requests and never answers; the port and the requests' readers."""
    held: list[asyncio.StreamReader] = []
    writers: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(reader)
        writers.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], held
    finally:
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()


async def test_closing_ends_the_calls_in_flight_and_leaks_no_socket(
    silent_port: tuple[int, list[asyncio.StreamReader]],
) -> None:
    port, held = silent_port
    admin = PulsarAdmin(f"http://127.0.0.1:{port}", tenant="t", namespace="n", timeout_s=30)
    calls = [asyncio.create_task(admin.partition_count(f"topic-{i}")) for i in range(3)]
    await until(lambda: len(held) == 3, 10, "three requests at the server")
    await admin.aclose()
    for call in calls:
        with pytest.raises(StorageUnavailable, match="admin client closed"):
            await call
    with pytest.raises(StorageUnavailable, match="is closed"):
        await admin.partition_count("later")


async def test_closing_while_a_call_connects_leaks_no_socket() -> None:
    """The leak CI met: the client closed while a call's connection is being made. A full
    accept queue holds the connection there; once freed, whatever connects is answered."""
    loop = asyncio.get_running_loop()
    with socket.socket() as listener, socket.socket() as filler:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)  # an accept queue of one
        listener.setblocking(False)
        filler.connect(listener.getsockname())  # fills it: the next SYN waits for a retry
        port = listener.getsockname()[1]
        admin = PulsarAdmin(f"http://127.0.0.1:{port}", tenant="t", namespace="n", timeout_s=30)
        call = asyncio.create_task(admin.partition_count("topic"))
        for _ in range(20):  # the call's connect is under way (its SYN dropped)
            await asyncio.sleep(0)
        await admin.aclose()
        answering = asyncio.create_task(_answer_all(loop, listener))
        try:
            with pytest.raises(StorageUnavailable, match="admin client closed"):
                async with asyncio.timeout(10):
                    await call
        finally:
            answering.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answering


async def _answer_all(loop: asyncio.AbstractEventLoop, listener: socket.socket) -> None:
    """Accept every connection and answer each request with one partition."""
    accepted: list[socket.socket] = []
    answering: set[asyncio.Task[None]] = set()
    try:
        while True:
            conn, _ = await loop.sock_accept(listener)
            accepted.append(conn)
            answering.add(asyncio.create_task(_answer(loop, conn)))
    finally:
        for task in answering:
            task.cancel()
        await asyncio.gather(*answering, return_exceptions=True)
        for conn in accepted:
            conn.close()


async def _answer(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
    body = b'{"partitions": 1}'
    head = f"HTTP/1.1 200 OK\r\ncontent-length: {len(body)}\r\n\r\n".encode()
    with contextlib.suppress(OSError):
        if await loop.sock_recv(conn, 65536):
            await loop.sock_sendall(conn, head + body)


async def test_cancelling_the_caller_still_cancels_its_call(
    silent_port: tuple[int, list[asyncio.StreamReader]],
) -> None:
    port, held = silent_port
    admin = PulsarAdmin(f"http://127.0.0.1:{port}", tenant="t", namespace="n", timeout_s=30)
    call = asyncio.create_task(admin.partition_count("topic"))
    await until(lambda: len(held) == 1, 10, "the request at the server")
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await admin.aclose()

"""The fenced sender writes nothing while the worker's session lease has lapsed, also when
it lapsed in the middle of an attempt, after the fence's own check (a SIGSTOP while the
attempt waited for a connection): the sender asks again right before it writes
(tests/integration/test_zombie_worker_real.py saw a resumed zombie's request 5 s after the
fault, past its session)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from delivery_workers.fenced import FencedSender
from delivery_workers.http_sender import HttpSender
from tests.support.senders import delivery_to

OK = b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"


@dataclass
class ScriptedLease:
    """``valid()`` answers from ``answers`` in turn (then True); ``until_valid`` returns at
    once, as a lease confirmed again would."""

    answers: list[bool]
    asked: int = 0
    waited: int = 0

    def valid(self) -> bool:
        self.asked += 1
        return self.answers.pop(0) if self.answers else True

    async def until_valid(self) -> None:
        self.waited += 1


@dataclass
class Endpoint:
    requests: list[float] = field(default_factory=list)
    port: int = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                self.requests.append(asyncio.get_running_loop().time())
                writer.write(OK)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    found = Endpoint()
    server = await asyncio.start_server(found.handle, "127.0.0.1", 0)
    found.port = server.sockets[0].getsockname()[1]
    yield found
    server.close()
    await server.wait_closed()


def _fenced(sender: HttpSender, lease: ScriptedLease) -> FencedSender:
    return FencedSender(sender, cast(Any, lease))


async def test_a_lease_lapsed_after_the_fence_checked_writes_nothing_until_valid(
    endpoint: Endpoint,
) -> None:
    # The fence's check passes, the sender's check before the write finds it lapsed, the
    # fence's next check too: held, then sent once the lease is valid again.
    lease = ScriptedLease([True, False, False])
    async with HttpSender() as sender:
        result = await _fenced(sender, lease).send(
            delivery_to(f"http://127.0.0.1:{endpoint.port}/h")
        )
        assert result.succeeded, result
        assert sender.pool.open_connections == 1  # the connection taken was given back
    assert len(endpoint.requests) == 1
    assert lease.waited == 1


async def test_a_valid_lease_costs_one_check_at_the_fence_and_one_at_the_write(
    endpoint: Endpoint,
) -> None:
    lease = ScriptedLease([])
    async with HttpSender() as sender:
        fenced = _fenced(sender, lease)
        for _ in range(3):
            assert (await fenced.send(delivery_to(f"http://127.0.0.1:{endpoint.port}/h"))).succeeded
    assert len(endpoint.requests) == 3
    assert lease.asked == 6 and lease.waited == 0


async def test_the_sender_alone_has_no_gate(endpoint: Endpoint) -> None:
    async with HttpSender() as sender:
        assert (await sender.send(delivery_to(f"http://127.0.0.1:{endpoint.port}/h"))).succeeded
    assert len(endpoint.requests) == 1

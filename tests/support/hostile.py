"""A hostile receiver and a loop watch, for the tests of the sender's answer limits.

:func:`hostile_endpoint` serves raw TCP on 127.0.0.1: it reads a request's head and body,
then writes whatever ``answer`` yields, chunk by chunk (awaiting ``drain`` between chunks,
so a 50 MB header is streamed, never built), sleeping where a chunk is a number (a slow
loris), until the answer ends or the sender hangs up. :class:`LoopWatch` records the longest
gap between the ticks of a task asking for a tick every millisecond: how long the event loop
was held by anything else.

    async with hostile_endpoint(lambda: huge_header(50 * MB)) as endpoint, LoopWatch() as watch:
        result = await sender.send(delivery_to(endpoint.url))
    assert watch.max_gap_s < 0.1 and endpoint.written < 50 * MB
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType

MB = 1024 * 1024
Chunk = bytes | float  # bytes to write, or seconds to wait
Answer = Callable[[], Iterator[Chunk]]


@dataclass
class HostileEndpoint:
    """What the hostile endpoint did: its URL, the bytes it managed to write, the requests."""

    answer: Answer
    read_request: bool = True  # False: answer as soon as connected (a TLS client gets text)
    port: int = 0
    written: int = 0
    requests: int = 0
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    writers: set[asyncio.StreamWriter] = field(default_factory=set)
    stopped: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        self.writers.add(writer)
        try:
            if self.read_request:
                head = await reader.readuntil(b"\r\n\r\n")
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
            self.requests += 1
            for chunk in self.answer():
                if isinstance(chunk, float):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.stopped.wait(), chunk)
                    if self.stopped.is_set():
                        break
                    continue
                writer.write(chunk)
                await writer.drain()
                self.written += len(chunk)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the sender hung up: what it should do
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            self.tasks.discard(task)
            self.writers.discard(writer)


@asynccontextmanager
async def hostile_endpoint(
    answer: Answer, *, read_request: bool = True
) -> AsyncIterator[HostileEndpoint]:
    """Serve ``answer`` to every request until the block ends (see the module doc)."""
    endpoint = HostileEndpoint(answer, read_request)
    server = await asyncio.start_server(endpoint.handle, "127.0.0.1", 0)
    endpoint.port = server.sockets[0].getsockname()[1]
    try:
        yield endpoint
    finally:
        server.close()
        endpoint.stopped.set()
        for writer in list(endpoint.writers):
            writer.close()  # a handler still reading a request ends too
        await asyncio.gather(*endpoint.tasks, return_exceptions=True)
        await server.wait_closed()


class LoopWatch:
    """The longest time the event loop went without running a ticking task, while in the
    ``async with`` block (``max_gap_s``)."""

    def __init__(self, tick_s: float = 0.001) -> None:
        self.tick_s = tick_s
        self.max_gap_s = 0.0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LoopWatch:
        self._task = asyncio.create_task(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        last = loop.time()
        while True:
            await asyncio.sleep(self.tick_s)
            now = loop.time()
            self.max_gap_s = max(self.max_gap_s, now - last)
            last = now


def repeated(first: bytes, filler: bytes, total: int, chunk: int = 64 * 1024) -> Iterator[Chunk]:
    """``first``, then ``filler`` repeated to ``total`` bytes, in chunks of ``chunk``."""
    yield first
    block = filler * max(1, chunk // len(filler))
    sent = len(first)
    while sent < total:
        yield block
        sent += len(block)

"""A TCP proxy in the test process that can be partitioned: the fault a test puts between one
process and a server (e.g. a worker and ZooKeeper) while the rest of the network works.

``partition()`` is a blackhole, not a reset: connections stay open, bytes both ways are
dropped, new connections are accepted and never forwarded, so the client learns of it only
by its own timeouts, as behind a dead link. ``heal()`` closes what was blackholed (those
streams lost bytes) and forwards again. Example::

    async with TcpProxy("127.0.0.1:2181") as proxy:
        ...  # the process connects to proxy.address
        proxy.partition()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self

_CHUNK = 65_536


class TcpProxy:
    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.partitioned = False
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.address = ""

    def partition(self) -> None:
        self.partitioned = True

    def heal(self) -> None:
        self.partitioned = False
        for writer in list(self._writers):  # their streams lost bytes: cut them
            writer.close()
        self._writers.clear()

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._server is not None
        self._server.close()
        self.heal()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        if self.partitioned:  # accepted, never forwarded: a connect that hangs
            self._spawn(self._pipe(reader, None))
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        self._spawn(self._pipe(reader, up_writer))
        self._spawn(self._pipe(up_reader, writer))

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None
    ) -> None:
        try:
            while data := await reader.read(_CHUNK):
                if self.partitioned or writer is None:
                    continue  # the blackhole
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.close()

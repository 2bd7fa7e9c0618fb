"""Requests asked in one turn of the loop go as one (metastore.turn_batch), each keeping its
own outcome."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from core.errors import Forbidden, HttpbusError, MetaStoreUnavailable
from metastore.protocol import Node
from metastore.turn_batch import TurnBatch


class Reads:
    """What the batch asked for, answering from ``nodes`` (a path missing: None)."""

    def __init__(self, **errors: Exception) -> None:
        self.nodes = {"/a": Node(b"a", 1), "/b": Node(b"b", 2)}
        self.errors = errors  # by path without the slash
        self.ones: list[str] = []
        self.manys: list[list[str]] = []
        self.gate: asyncio.Event | None = None  # set: answers wait for it

    async def one(self, path: str) -> Node | None:
        self.ones.append(path)
        await self._wait()
        return self.nodes.get(path)

    async def many(self, paths: Sequence[str]) -> list[Node | None | HttpbusError]:
        self.manys.append(list(paths))
        await self._wait()
        if "all" in self.errors:
            raise self.errors["all"]
        return [self.errors.get(p[1:]) or self.nodes.get(p) for p in paths]

    async def _wait(self) -> None:
        if self.gate is not None:
            await self.gate.wait()


async def test_reads_of_one_turn_are_one_request_in_their_order() -> None:
    reads = Reads()
    gets = TurnBatch(reads.one, reads.many)
    found = await asyncio.gather(gets.ask("/b"), gets.ask("/x"), gets.ask("/a"))
    assert found == [Node(b"b", 2), None, Node(b"a", 1)]
    assert reads.manys == [["/b", "/x", "/a"]] and reads.ones == []


async def test_a_read_alone_is_a_plain_read() -> None:
    reads = Reads()
    gets = TurnBatch(reads.one, reads.many)
    assert await gets.ask("/a") == Node(b"a", 1)
    assert await gets.ask("/b") == Node(b"b", 2)  # the next turn: another request
    assert reads.ones == ["/a", "/b"] and reads.manys == []


async def test_a_reads_error_is_its_own() -> None:
    reads = Reads(b=Forbidden("no access to /b"))
    gets = TurnBatch(reads.one, reads.many)
    found = await asyncio.gather(gets.ask("/a"), gets.ask("/b"), return_exceptions=True)
    assert found[0] == Node(b"a", 1)
    assert isinstance(found[1], Forbidden)


async def test_the_requests_error_is_everyones() -> None:
    reads = Reads(all=MetaStoreUnavailable("no answer in 10 s"))
    gets = TurnBatch(reads.one, reads.many)
    found = await asyncio.gather(gets.ask("/a"), gets.ask("/b"), return_exceptions=True)
    assert all(isinstance(one, MetaStoreUnavailable) for one in found)


async def test_a_cancelled_caller_leaves_the_others_their_answers() -> None:
    reads = Reads()
    reads.gate = asyncio.Event()
    gets = TurnBatch(reads.one, reads.many)
    first, second = asyncio.create_task(gets.ask("/a")), asyncio.create_task(gets.ask("/b"))
    await asyncio.sleep(0.01)
    first.cancel()
    reads.gate.set()
    assert await second == Node(b"b", 2)
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_closing_cancels_the_waiting_callers() -> None:
    reads = Reads()
    reads.gate = asyncio.Event()  # never set: the request is on the wire when it closes
    gets = TurnBatch(reads.one, reads.many)
    waiting = [asyncio.create_task(gets.ask(p)) for p in ("/a", "/b")]
    await asyncio.sleep(0.01)
    async with asyncio.timeout(5):
        await gets.aclose()
        done = await asyncio.gather(*waiting, return_exceptions=True)
    assert all(isinstance(one, asyncio.CancelledError) for one in done)

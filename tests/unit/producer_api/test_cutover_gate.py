"""The producer's gate: held requests are released or refused in bounded time, writes in
flight are counted, and a producer out of sync with the metastore refuses (503)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core.errors import CutoverTimeout, MetaStoreUnavailable
from core.model import Topic
from producer_api.cutover import Gate
from segments.cutover.machine import Mode

OLD = Topic(project="p", name="t")
NEW = Topic(project="p", name="t", description="after the switch")


class Cache:
    async def topic(self, project: str, name: str) -> Topic:
        return NEW


def gate(hold_s: float = 0.3) -> Gate:
    return Gate(("p", "t"), Cache(), hold_s)  # type: ignore[arg-type]


async def test_old_mode_passes_at_once() -> None:
    assert await gate().admit(OLD) is OLD


async def test_a_held_request_times_out_with_retry_after() -> None:
    g = gate(0.2)
    g.set_mode(Mode.HOLD)
    with pytest.raises(CutoverTimeout) as err:
        await g.admit(OLD)
    assert err.value.code.status == 503 and err.value.retry_after == 1


@pytest.mark.parametrize(("mode", "expected"), [(Mode.NEW, NEW), (Mode.OLD, OLD)])
async def test_a_held_request_is_released_by_commit_or_rollback(
    mode: Mode, expected: Topic
) -> None:
    g = gate(5)
    g.set_mode(Mode.HOLD)
    waiting = asyncio.create_task(g.admit(OLD))
    await asyncio.sleep(0.05)
    assert not waiting.done()
    g.set_mode(mode)
    assert await asyncio.wait_for(waiting, 1) is expected


async def test_out_of_sync_refuses_with_503() -> None:
    g = gate()
    g.set_mode(Mode.OLD, out_of_sync=True)
    with pytest.raises(MetaStoreUnavailable):
        await g.admit(OLD)


async def test_drain_waits_for_writes_in_flight() -> None:
    g = gate()
    release = asyncio.Event()

    class Writer:
        async def write(self, topic: Topic, record: Any) -> str:
            await release.wait()
            return "written"

    write = asyncio.create_task(g.write(Writer(), OLD, None))  # type: ignore[arg-type]
    await asyncio.sleep(0.01)
    assert g.inflight == 1 and not await g.drained(0.05)
    release.set()
    assert await write == "written"
    assert await g.drained(0.5)

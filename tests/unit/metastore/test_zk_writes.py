"""The ZooKeeper store's write budget: at most so many writes on the wire, a multi of n
counting n, so a session's heartbeat never queues behind thousands of its own writes."""

from __future__ import annotations

import asyncio

from metastore.zk_writes import WriteBudget


async def test_a_request_waits_until_its_writes_fit_then_goes() -> None:
    budget = WriteBudget(128)
    first = budget.take(100)
    await first.__aenter__()
    second = asyncio.ensure_future(_hold(budget, 50))
    await asyncio.sleep(0.02)
    assert not second.done() and budget.out == 100
    await first.__aexit__(None, None, None)
    assert await asyncio.wait_for(second, 1) == 50
    assert budget.out == 0


async def test_a_multi_larger_than_the_budget_goes_alone() -> None:
    budget = WriteBudget(128)
    async with budget.take(500):
        assert budget.out == 128
        one = asyncio.ensure_future(_hold(budget, 1))
        await asyncio.sleep(0.02)
        assert not one.done()
    assert await asyncio.wait_for(one, 1) == 1


async def test_many_small_writes_share_it() -> None:
    budget = WriteBudget(8)
    peak = 0

    async def write() -> None:
        nonlocal peak
        async with budget.take(1):
            peak = max(peak, budget.out)
            await asyncio.sleep(0.001)

    await asyncio.wait_for(asyncio.gather(*(write() for _ in range(100))), 5)
    assert peak == 8 and budget.out == 0


async def _hold(budget: WriteBudget, writes: int) -> int:
    async with budget.take(writes):
        return budget.out

"""SingleFlight: the one load per key that the topic cache and the project quotas share."""

from __future__ import annotations

import asyncio

import pytest

from producer_api.single_flight import SingleFlight


async def test_overlapping_callers_share_one_load_and_a_later_caller_starts_another() -> None:
    calls: list[str] = []
    started, release = asyncio.Event(), asyncio.Event()

    async def load(key: str) -> str:
        calls.append(key)
        started.set()
        await release.wait()
        return key.upper()

    loads: SingleFlight[str, str] = SingleFlight(load)
    waiting = [asyncio.ensure_future(loads.get("a")) for _ in range(5)]
    other = asyncio.ensure_future(loads.get("b"))
    await started.wait()  # every caller has asked by the time the load runs
    release.set()
    assert await asyncio.gather(*waiting) == ["A"] * 5
    assert await other == "B"
    assert calls == ["a", "b"]
    assert await loads.get("a") == "A"
    assert calls == ["a", "b", "a"]


async def test_a_cancelled_caller_leaves_the_load_to_the_others() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def load(key: str) -> str:
        started.set()
        await release.wait()
        return key

    loads: SingleFlight[str, str] = SingleFlight(load)
    first = asyncio.ensure_future(loads.get("k"))
    second = asyncio.ensure_future(loads.get("k"))
    await started.wait()
    first.cancel()
    release.set()
    assert await second == "k"
    assert first.cancelled()


async def test_a_failed_load_fails_its_callers_and_is_not_kept() -> None:
    attempts = 0

    async def load(key: str) -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            raise LookupError(key)
        return key

    loads: SingleFlight[str, str] = SingleFlight(load)
    with pytest.raises(LookupError):
        await loads.get("k")
    assert await loads.get("k") == "k"

"""The contract of idempotent publish's store, run on every backend (the embedded one in the
unit tests, PostgreSQL beside real ZooKeeper in the integration tests): of racing claims of
one id exactly one wins, the winner's place answers later claims, a pending claim is waited
for, and a stale one (expired, older than any publish, or owned by a dead producer) is taken
over by one claimant.

    world = DedupeWorld(lambda: EmbeddedDedupeTable(path), meta)
    await CASES["racing"](world)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from core.errors import DuplicateInFlight
from metastore.dedupe import PRODUCERS, Claim, Original
from metastore.dedupe.claims import Claims
from metastore.dedupe.liveness import Members
from metastore.dedupe.protocol import DedupeTable
from metastore.protocol import MetaStore

W = 60_000


def scope() -> str:
    return f"shop/orders-{time.time_ns()}@1"


def now_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass
class DedupeWorld:
    open_table: Callable[[], DedupeTable]
    meta: MetaStore
    prefix: str = ""  # of member names: the metastore may be shared

    def member(self, name: str) -> str:
        return f"{self.prefix}{name}"

    @asynccontextmanager
    async def store(self, member: str, **options: Any) -> AsyncIterator[Claims]:
        async with Claims(
            self.open_table(), Members(self.meta), self.member(member), **options
        ) as claims:
            yield claims


async def first_claim_wins_and_its_place_answers_the_next(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    async with world.store("p1") as one, world.store("p2") as two:
        claim = await one.claim(s, "id-1", W, now)
        assert isinstance(claim, Claim)
        await one.record(claim, 3, 1, 42)
        for at in (now + 1, now + W - 1):  # within the window, from the next bucket too
            assert await two.claim(s, "id-1", W, at) == Original("id-1", 3, 1, 42)
        assert isinstance(await two.claim(s, "id-2", W, now), Claim)


async def racing_claims_from_two_stores_leave_exactly_one_winner(world: DedupeWorld) -> None:
    s = scope()
    await world.meta.join(PRODUCERS, world.member("p1"), b"")
    await world.meta.join(PRODUCERS, world.member("p2"), b"")
    async with world.store("p1", wait_s=5) as a, world.store("p2", wait_s=5) as b:

        async def publish(store: Claims, at: int) -> Claim | Original:
            found = await store.claim(s, "same", W, at)
            if isinstance(found, Claim):
                await store.record(found, 1, 0, 7)
            return found

        boundary = (now_ms() // W + 1) * W  # one side just before a bucket's end, one after
        outcomes = await asyncio.gather(
            *(publish((a, b)[i % 2], boundary - 1 + i % 2) for i in range(10))
        )
        assert sum(isinstance(o, Claim) for o in outcomes) == 1
        assert [o for o in outcomes if isinstance(o, Original)] == [Original("same", 1, 0, 7)] * 9


async def an_expired_id_is_claimed_again(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    async with world.store("p1") as store:
        claim = await store.claim(s, "id", W, now)
        assert isinstance(claim, Claim)
        await store.record(claim, 1, 0, 1)
        assert isinstance(await store.claim(s, "id", W, now + W + 1), Claim)


async def a_released_claim_can_be_claimed_again(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    async with world.store("p1") as store:
        claim = await store.claim(s, "id", W, now)
        assert isinstance(claim, Claim)
        await store.release(claim)
        assert isinstance(await store.claim(s, "id", W, now + 5), Claim)


async def a_pending_claim_of_a_live_producer_is_waited_for(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    await world.meta.join(PRODUCERS, world.member("p1"), b"")
    async with (
        world.store("p1") as owner,
        world.store("p2", wait_s=0.2) as other,
        world.store("p3", wait_s=10) as patient,
    ):
        claim = await owner.claim(s, "id", W, now)
        assert isinstance(claim, Claim)
        with pytest.raises(DuplicateInFlight) as refused:
            await other.claim(s, "id", W, now + 1)
        assert refused.value.code.status == 503 and refused.value.retry_after == 1
        waiting = asyncio.create_task(patient.claim(s, "id", W, now + 2))
        await owner.record(claim, 2, 1, 9)
        assert await waiting == Original("id", 2, 1, 9)


async def a_pending_claim_of_a_dead_producer_is_taken_over(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    async with world.store("gone") as gone, world.store("p2", wait_s=0.2) as p2:
        dead = await gone.claim(s, "id", W, now)  # "gone" never joined the producers
        assert isinstance(dead, Claim)
        taken = await p2.claim(s, "id", W, now + 1)
        assert isinstance(taken, Claim)
        await p2.record(taken, 5, 0, 50)
        await gone.record(dead, 4, 0, 40)  # too late: logged, not written
        assert await p2.claim(s, "id", W, now + 2) == Original("id", 5, 0, 50)


async def two_takers_of_a_dead_claim_one_wins(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    async with world.store("gone") as gone, world.store("t1") as t1, world.store("t2") as t2:
        await world.meta.join(PRODUCERS, world.member("t1"), b"")
        await world.meta.join(PRODUCERS, world.member("t2"), b"")
        for k in range(10):
            assert isinstance(await gone.claim(s, f"id-{k}", W, now), Claim)

        async def take(store: Claims, k: int) -> Claim | Original:
            found = await store.claim(s, f"id-{k}", W, now + 1)
            if isinstance(found, Claim):
                await store.record(found, 1, 0, k)
            return found

        for k in range(10):
            both = await asyncio.gather(take(t1, k), take(t2, k))
            assert sorted(type(o).__name__ for o in both) == ["Claim", "Original"], both


async def a_pending_claim_older_than_any_publish_is_taken_over(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    await world.meta.join(PRODUCERS, world.member("p1"), b"")
    async with world.store("p1") as p1, world.store("p2", wait_s=0.2, stale_s=1) as p2:
        stuck = await p1.claim(s, "id", W, now)  # never recorded
        assert isinstance(stuck, Claim)
        assert isinstance(await p2.claim(s, "id", W, now + 1_001), Claim)


async def claims_sharing_one_statement_each_get_their_own_outcome(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    async with world.store("p1") as store:
        for k in range(0, 30, 6):  # five of the thirty were stored before
            claim = await store.claim(s, f"id-{k}", W, now)
            assert isinstance(claim, Claim)
            await store.record(claim, 1, 0, k)
        found = await asyncio.gather(*(store.claim(s, f"id-{k}", W, now) for k in range(30)))
        originals = {o.message_id: o.position for o in found if isinstance(o, Original)}
        assert originals == {f"id-{k}": k for k in range(0, 30, 6)}
        assert sum(isinstance(o, Claim) for o in found) == 25


async def expiry_drops_whole_partitions_no_claim_reads(world: DedupeWorld) -> None:
    s, now = scope(), now_ms()
    table = world.open_table()
    async with world.store("p1") as store, table:
        claim = await store.claim(s, "id", W, now)
        assert isinstance(claim, Claim)
        await store.record(claim, 1, 0, 1)
        keys = [key for key, _ in claim.rows]
        await table.expire(now)
        assert set(await table.read(keys)) == set(keys)  # still read by claims: kept
        last = max(k.until_ms for k in keys)
        assert await table.expire(last + 3 * 3_600_000) >= 1  # past every until: dropped
        assert await table.read(keys) == {}


CASES: dict[str, Callable[[DedupeWorld], Awaitable[None]]] = {
    f.__name__: f
    for f in (
        first_claim_wins_and_its_place_answers_the_next,
        racing_claims_from_two_stores_leave_exactly_one_winner,
        an_expired_id_is_claimed_again,
        a_released_claim_can_be_claimed_again,
        a_pending_claim_of_a_live_producer_is_waited_for,
        a_pending_claim_of_a_dead_producer_is_taken_over,
        two_takers_of_a_dead_claim_one_wins,
        a_pending_claim_older_than_any_publish_is_taken_over,
        claims_sharing_one_statement_each_get_their_own_outcome,
        expiry_drops_whole_partitions_no_claim_reads,
    )
}

"""The dedupe claims on a metastore: of racing claims of one id exactly one wins, the
winner's place answers later claims, and stale claims (expired, or owned by a dead
producer) are taken over by one claimant."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.errors import DuplicateInFlight
from metastore import paths
from metastore.dedupe import PRODUCERS, Claim, DedupeStore, Original
from metastore.embedded import EmbeddedMetaStore
from tests.support.until import until

P, T, W = "shop", "orders", 60_000
NOW = 1_000_000_000_000


async def test_the_first_claim_wins_and_its_place_answers_the_next(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        one, two = DedupeStore(meta, "p1"), DedupeStore(meta, "p2")
        claim = await one.claim(P, T, "id-1", W, NOW)
        assert isinstance(claim, Claim)
        await one.record(claim, 3, 1, 42)
        # within the window, from the next bucket too
        for at in (NOW + 1, NOW + W - 1):
            again = await two.claim(P, T, "id-1", W, at)
            assert again == Original("id-1", 3, 1, 42)
        other = await two.claim(P, T, "id-2", W, NOW)
        assert isinstance(other, Claim)


async def test_racing_claims_from_two_sessions_leave_exactly_one_winner(tmp_path: Path) -> None:
    file = str(tmp_path / "m.db")
    async with EmbeddedMetaStore(file) as a, EmbeddedMetaStore(file) as b:
        stores = [DedupeStore(a, "p1", wait_s=5), DedupeStore(b, "p2", wait_s=5)]
        await a.join(PRODUCERS, "p1", b"")
        await b.join(PRODUCERS, "p2", b"")

        async def publish(store: DedupeStore, at: int) -> Claim | Original:
            found = await store.claim(P, T, "same", W, at)
            if isinstance(found, Claim):
                await store.record(found, 1, 0, 7)
            return found

        # one just before a bucket's end, the other just after: still the same id
        boundary = (NOW // W + 1) * W
        outcomes = await asyncio.gather(
            *(publish(stores[i % 2], boundary - 1 + i % 2) for i in range(10))
        )
        assert sum(isinstance(o, Claim) for o in outcomes) == 1
        assert [o for o in outcomes if isinstance(o, Original)] == [Original("same", 1, 0, 7)] * 9


async def test_an_expired_id_is_claimed_again(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        store = DedupeStore(meta, "p1")
        claim = await store.claim(P, T, "id", W, NOW)
        assert isinstance(claim, Claim)
        await store.record(claim, 1, 0, 1)
        later = await store.claim(P, T, "id", W, NOW + W + 1)
        assert isinstance(later, Claim)


async def test_a_released_claim_can_be_claimed_again(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        store = DedupeStore(meta, "p1")
        claim = await store.claim(P, T, "id", W, NOW)
        assert isinstance(claim, Claim)
        await store.release(claim)
        assert isinstance(await store.claim(P, T, "id", W, NOW + 5), Claim)


async def test_a_pending_claim_of_a_live_producer_is_waited_for(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        await meta.join(PRODUCERS, "p1", b"")
        owner, other = DedupeStore(meta, "p1"), DedupeStore(meta, "p2", wait_s=0.2)
        claim = await owner.claim(P, T, "id", W, NOW)
        assert isinstance(claim, Claim)
        with pytest.raises(DuplicateInFlight) as refused:
            await other.claim(P, T, "id", W, NOW + 1)
        assert refused.value.code.status == 503 and refused.value.retry_after == 1
        waiting = asyncio.create_task(DedupeStore(meta, "p2", wait_s=10).claim(P, T, "id", W, NOW))
        await owner.record(claim, 2, 1, 9)
        assert await waiting == Original("id", 2, 1, 9)


async def test_a_pending_claim_of_a_dead_producer_is_taken_over(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        dead = await DedupeStore(meta, "gone").claim(P, T, "id", W, NOW)  # never joined
        assert isinstance(dead, Claim)
        taken = await DedupeStore(meta, "p2", wait_s=0.2).claim(P, T, "id", W, NOW + 1)
        assert isinstance(taken, Claim)


async def test_the_sweep_deletes_buckets_no_lookup_reads(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        store = DedupeStore(meta, "p1")
        for k in range(4):  # each new bucket starts a sweep in the background
            found = await store.claim(P, T, f"id-{k}", W, NOW + k * W)
            assert isinstance(found, Claim)
        start = (NOW + 3 * W) // W * W

        async def swept() -> bool:
            left = [int(n) for n in await meta.children(paths.dedupe_topic(P, T))]
            return min(left) >= start - W and start in left

        await until(swept, timeout=10, what="the buckets older than the previous one deleted")
        await store.aclose()


async def test_deleting_the_topic_forgets_its_ids(tmp_path: Path) -> None:
    from core.model import Project, Topic
    from metastore.catalog import Catalog
    from tests.support.world import segment

    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name=P))
        topic = Topic(project=P, name=T, dedupe_window="1m")
        await catalog.create_topic(topic, segment("embedded", storage=T))
        store = DedupeStore(meta, "p1")
        claim = await store.claim(P, T, "id", W, NOW)
        assert isinstance(claim, Claim)
        await store.record(claim, 1, 0, 0)
        await catalog.delete_topic(P, T)
        assert await meta.children(paths.dedupe_topic(P, T)) == []
        await catalog.create_topic(topic, segment("embedded", storage=T))
        assert isinstance(await store.claim(P, T, "id", W, NOW), Claim)


async def test_a_pending_claim_older_than_any_publish_is_taken_over(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        await meta.join(PRODUCERS, "p1", b"")
        stuck = await DedupeStore(meta, "p1").claim(P, T, "id", W, NOW)  # never recorded
        assert isinstance(stuck, Claim)
        later = DedupeStore(meta, "p2", wait_s=0.2, stale_s=1)
        assert isinstance(await later.claim(P, T, "id", W, NOW + 1_001), Claim)


async def test_claims_sharing_one_transaction_each_get_their_own_outcome(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        store = DedupeStore(meta, "p1")
        for k in range(0, 30, 6):  # five of the thirty were stored before
            claim = await store.claim(P, T, f"id-{k}", W, NOW)
            assert isinstance(claim, Claim)
            await store.record(claim, 1, 0, k)
        found = await asyncio.gather(*(store.claim(P, T, f"id-{k}", W, NOW) for k in range(30)))
        originals = {o.message_id: o.position for o in found if isinstance(o, Original)}
        assert originals == {f"id-{k}": k for k in range(0, 30, 6)}
        assert sum(isinstance(o, Claim) for o in found) == 25
        await store.aclose()

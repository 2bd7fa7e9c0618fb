"""The dedupe store on real PostgreSQL beside real ZooKeeper (its production pair): the
contract of tests/support/dedupe.py (racing claims, waits, takeovers, partitions dropped
whole), and a claim of a producer whose ZooKeeper session ended taken over at once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from core.errors import DuplicateInFlight
from metastore.dedupe import PRODUCERS, Claim, Original
from metastore.dedupe.postgres import PostgresDedupeTable
from metastore.dedupe.protocol import Entry, RowKey
from metastore.zookeeper import ZooKeeperMetaStore
from reports import migrate
from tests.support.dedupe import CASES, DedupeWorld, W, now_ms, scope
from tests.support.services import RealServices

pytestmark = [pytest.mark.postgres, pytest.mark.zookeeper]


@pytest.fixture
async def world(
    real_services: RealServices, postgres_database: str, unique: str
) -> AsyncIterator[DedupeWorld]:
    migrate.upgrade(postgres_database)
    root = f"/test-dedupe-{unique}"
    try:
        async with ZooKeeperMetaStore(real_services.zookeeper, root=root) as meta:
            yield DedupeWorld(lambda: PostgresDedupeTable(postgres_database), meta)
    finally:
        async with ZooKeeperMetaStore(real_services.zookeeper, root="/") as admin:
            if await admin.get(root) is not None:
                await admin.delete(root, recursive=True)


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
async def test_the_contract(
    world: DedupeWorld, case: Callable[[DedupeWorld], Awaitable[None]]
) -> None:
    await case(world)


async def test_the_claim_of_a_producer_whose_session_ended_is_taken_over(
    world: DedupeWorld, real_services: RealServices, unique: str
) -> None:
    s, now = scope(), now_ms()
    root = f"/test-dedupe-{unique}"
    async with world.store("crashed") as crashed:
        async with ZooKeeperMetaStore(real_services.zookeeper, root=root) as session:
            await session.join(PRODUCERS, world.member("crashed"), b"")
            claim = await crashed.claim(s, "id", W, now)
            assert isinstance(claim, Claim)
            async with world.store("live", wait_s=0.3) as live:
                with pytest.raises(DuplicateInFlight):
                    await live.claim(s, "id", W, now + 1)  # its owner lives: wait, then 503
        # the session ended (its ephemeral membership with it): taken over at once
        async with world.store("live", wait_s=0.3) as live:  # no wait: a 503 fails it
            taken = await live.claim(s, "id", W, now + 2)
            assert isinstance(taken, Claim)
            await live.record(taken, 2, 0, 5)
            assert await live.claim(s, "id", W, now + 3) == Original("id", 2, 0, 5)


async def test_claims_are_planned_each_time_and_commit_without_waiting_for_the_flush(
    postgres_database: str,
) -> None:
    """docs/capacity.md, "Idempotent publish": a plan made while a partition was empty is
    never kept, and a claim's round trip does not wait for the write-ahead log's flush."""
    migrate.upgrade(postgres_database)
    async with PostgresDedupeTable(postgres_database, connections=1) as table:
        await table.write([(RowKey("p/t@1", "id", 0, W), Entry(1, "p1", 7))], [])
        async with table._connection() as conn:
            settings = [
                (await (await conn.execute(f"SHOW {name}")).fetchone() or ("",))[0]
                for name in ("plan_cache_mode", "synchronous_commit")
            ]
        assert settings == ["force_custom_plan", "off"]
        assert await table.read([RowKey("p/t@1", "id", 0, W)]) == {
            RowKey("p/t@1", "id", 0, W): Entry(1, "p1", 7)
        }

"""The dedupe store on its embedded backend (SQLite, beside the embedded metastore): the
contract of tests/support/dedupe.py, and what only the embedded backend promises."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from metastore.config import EmbeddedMetaStoreConfig, ZooKeeperConfig
from metastore.dedupe import EmbeddedDedupeConfig, default_dedupe, open_dedupe
from metastore.dedupe.claims import Claims
from metastore.dedupe.embedded import EmbeddedDedupeTable
from metastore.embedded import EmbeddedMetaStore
from tests.support.dedupe import CASES, DedupeWorld


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[DedupeWorld]:
    file = str(tmp_path / "dedupe.db")
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        yield DedupeWorld(lambda: EmbeddedDedupeTable(file), meta)


@pytest.mark.parametrize("case", CASES.values(), ids=list(CASES))
async def test_the_contract(
    world: DedupeWorld, case: Callable[[DedupeWorld], Awaitable[None]]
) -> None:
    await case(world)


def test_the_dedupe_store_sits_beside_an_embedded_metastore_and_nowhere_by_default() -> None:
    beside = default_dedupe(EmbeddedMetaStoreConfig(path="/data/dev/metastore.db"))
    assert beside == EmbeddedDedupeConfig(path="/data/dev/dedupe.db")
    assert default_dedupe(ZooKeeperConfig()) is None  # production: a database to name


async def test_a_producer_without_a_dedupe_store_refuses_what_needs_one(tmp_path: Path) -> None:
    from core.errors import StorageUnavailable

    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        store = open_dedupe(None, meta, "p1")
        assert not isinstance(store, Claims)
        async with store:
            with pytest.raises(StorageUnavailable, match="no dedupe store"):
                await store.claim("p/t@1", "id", 60_000, 1)

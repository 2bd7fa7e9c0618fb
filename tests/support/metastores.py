"""What every backend's ``MetaStore`` contract module wires alike: a factory of started stores,
closed at the end, and the two stores the contract asks for (``store``, ``other_store``).

    @pytest.fixture
    async def make_store(db_file: str) -> AsyncIterator[MakeStore]:
        async with started_stores(lambda: EmbeddedMetaStore(db_file)) as make:
            yield make

and ``from tests.support.metastores import other_store_fixture, store_fixture``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import pytest

from metastore.protocol import MetaStore

S = TypeVar("S", bound=MetaStore)


@asynccontextmanager
async def started_stores(build: Callable[[], S]) -> AsyncIterator[Callable[[], Awaitable[S]]]:
    """An async factory of started stores built by ``build``; each is closed on the way out."""
    made: list[S] = []

    async def make() -> S:
        store = build()
        await store.start()
        made.append(store)
        return store

    yield make
    for store in made:
        await store.aclose()


@pytest.fixture(name="store")
async def store_fixture(make_store: Callable[[], Awaitable[MetaStore]]) -> MetaStore:
    """A started store of the module's ``make_store``."""
    return await make_store()


@pytest.fixture(name="other_store")
async def other_store_fixture(make_store: Callable[[], Awaitable[MetaStore]]) -> MetaStore:
    """A second, independent session on the same tree: another process's view."""
    return await make_store()

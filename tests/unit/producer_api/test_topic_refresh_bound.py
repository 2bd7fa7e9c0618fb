"""A producer cut off from the metastore answers a write its segment's fence refused with
503 ``metastore_unavailable`` within its bound, instead of holding it for as long as the
partition lasts (found by tests/chaos/test_producer_partitioned.py: 8.3 s with no answer)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from core.errors import MetaStoreUnavailable
from core.model import Topic
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from producer_api.metadata import TopicCache
from tests.support.world import catalog_with_t


class CutOff(Catalog):
    """A catalog whose topic reads never answer (a metastore behind a partition)."""

    async def get_topic(self, project: str, name: str) -> Topic:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


async def _catalog(tmp_path: Path) -> EmbeddedMetaStore:
    store = EmbeddedMetaStore(str(tmp_path / "m.db"))
    await store.start()
    await catalog_with_t(store)
    return store


async def test_a_refresh_the_metastore_does_not_answer_is_a_503_within_the_bound(
    tmp_path: Path,
) -> None:
    store = await _catalog(tmp_path)
    try:
        cache = TopicCache(CutOff(store), refresh_within_s=0.2)
        started = time.monotonic()
        with pytest.raises(MetaStoreUnavailable, match="did not answer within 0.2 s") as caught:
            await cache.refresh("p", "t")
        assert time.monotonic() - started < 2
        assert caught.value.code.status == 503 and caught.value.retry_after == 1
        answering = TopicCache(Catalog(store), refresh_within_s=0.2)
        assert (await answering.refresh("p", "t")).name == "t"
    finally:
        await store.aclose()

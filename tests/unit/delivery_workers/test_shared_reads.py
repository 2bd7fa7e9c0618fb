"""The shared tail: one storage read for many readers at the end, memory for readers inside the
window, storage for readers elsewhere; on a real embedded store."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.errors import StorageUnavailable
from core.model import SegmentState, Topic
from delivery_workers import shared_reads
from delivery_workers.shared_reads import Tail, TopicCache
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from segments.config import EmbeddedClusterConfig
from segments.embedded import create_store
from segments.protocol import Record, SegmentStore, Stored
from tests.support.until import until
from tests.support.world import catalog_with_t, segment


class Counting:
    """Counts the reads that reach the store."""

    def __init__(self, inner: SegmentStore) -> None:
        self.inner, self.reads = inner, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def read(self, *args: Any, **kwargs: Any) -> list[Stored]:
        self.reads += 1
        return await self.inner.read(*args, **kwargs)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Counting]:
    async with create_store(EmbeddedClusterConfig(path=str(tmp_path / "s.db"))) as inner:
        await inner.create_topic("t", 1, retention_ms=3_600_000)
        yield Counting(inner)


async def _produce(store: Counting, n: int, prefix: str = "m") -> None:
    for i in range(n):
        await store.inner.produce("t", Record(f"{prefix}{i}".encode()), partition=0)


async def test_readers_at_the_tail_share_one_storage_read(store: Counting) -> None:
    tail = Tail(store, "t", 0, keep=100)  # type: ignore[arg-type]
    waiting = [asyncio.create_task(tail.read(0, 500, 5.0)) for _ in range(50)]
    await asyncio.sleep(0.05)
    records = [Record(f"m{i}".encode()) for i in range(3)]
    await store.inner.produce_many("t", records)  # one transaction: seen at once
    got = await asyncio.gather(*waiting)
    assert all([m.value for m in batch] == [b"m0", b"m1", b"m2"] for batch in got)
    assert store.reads == 1
    assert [m.value for m in await tail.read(1, 500, 1.0)] == [b"m1", b"m2"]  # from memory
    assert store.reads == 1


async def test_window_bounds_and_a_reader_behind_it(store: Counting) -> None:
    await _produce(store, 10)
    tail = Tail(store, "t", 0, keep=4)  # type: ignore[arg-type]
    assert len(await tail.read(0, 500, 1.0)) == 10
    assert list(tail.positions) == [6, 7, 8, 9]
    behind = await tail.read(2, 3, 1.0)  # outside the window: read from storage
    assert [m.value for m in behind] == [b"m2", b"m3", b"m4"]
    assert [m.value for m in await tail.read(8, 500, 1.0)] == [b"m8", b"m9"]
    assert await tail.read(10, 500, 0.1) == []


async def test_a_tail_nobody_follows_moves_to_the_next_start(
    store: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_reads, "IDLE_S", 0.0)
    await _produce(store, 10)
    tail = Tail(store, "t", 0, keep=100)  # type: ignore[arg-type]
    await tail.read(0, 2, 1.0)  # the tail now stands at 10 (it fetched everything)
    tail._anchor(3)
    assert tail.end == 3
    got = await tail.read(7, 500, 1.0)  # ahead, and the tail is idle: it moves to 7
    assert [m.value for m in got] == [b"m7", b"m8", b"m9"] and tail.end == 10


async def test_waiters_for_news_wake_only_for_messages_and_share_the_fetches(
    store: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An idle runner waits at a partition's end with ``read_news``: the tail fetches on,
    one fetch at a time for every waiter, and an empty fetch wakes nobody."""
    monkeypatch.setattr(shared_reads, "FETCH_WAIT_S", 0.05)
    tail = Tail(store, "t", 0, keep=100)  # type: ignore[arg-type]
    assert await tail.read(0, 500, 0.05) == []  # the tail now stands at 0
    woken: list[list[Stored]] = []

    async def wait() -> None:
        woken.append(await tail.read_news(0, 500, 30.0))

    waiting = [asyncio.create_task(wait()) for _ in range(50)]
    await until(lambda: store.reads >= 8, 10, "empty fetches while the 50 wait")
    assert woken == [] and store.reads < 50  # not a fetch, nor a wake-up, per waiter
    await store.inner.produce_many("t", [Record(b"a"), Record(b"b")])
    await asyncio.wait_for(asyncio.gather(*waiting), 10)
    assert all([m.value for m in batch] == [b"a", b"b"] for batch in woken)
    await until(lambda: tail._follower is None, 5, "the fetches to stop with no waiter")
    reads = store.reads
    assert await tail.read_news(2, 500, 0.2) == []  # nothing more within its timeout
    assert store.reads > reads


async def test_a_failed_fetch_is_raised_to_every_waiter_for_news(
    store: Counting, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(shared_reads, "FETCH_WAIT_S", 0.05)
    tail = Tail(store, "t", 0, keep=100)  # type: ignore[arg-type]
    await tail.read(0, 500, 0.05)
    waiting = [asyncio.create_task(tail.read_news(0, 500, 30.0)) for _ in range(3)]
    await until(lambda: store.reads >= 3, 10, "the waiters' fetches")

    async def refuse(*args: Any, **kwargs: Any) -> list[Stored]:
        raise StorageUnavailable("the cluster is away")

    monkeypatch.setattr(store, "read", refuse)
    outcomes = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 10)
    assert all(isinstance(o, StorageUnavailable) for o in outcomes)


@dataclass
class _Calls:
    calls: int = 0


def _counted(meta: EmbeddedMetaStore, method: str) -> _Calls:
    """Count the calls of ``meta``'s ``method`` from now on."""
    counted = _Calls()
    real = getattr(meta, method)

    async def counting(*args: Any) -> Any:
        counted.calls += 1
        return await real(*args)

    setattr(meta, method, counting)
    return counted


async def test_topic_cache_reads_once_per_ttl(tmp_path: Path) -> None:
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        await catalog_with_t(meta)
        cache = TopicCache(meta, ttl_s=0.3, watched_ttl_s=0.3)
        gets = _counted(meta, "get")
        topics = await asyncio.gather(*(cache.get_topic("p", "t") for _ in range(100)))
        first = gets.calls
        assert all(t.name == "t" for t in topics) and 0 < first <= 6  # and 2 watches
        await cache.get_topic("p", "t")
        assert gets.calls == first  # within the ttl: no read
        await asyncio.sleep(0.35)
        await cache.get_topic("p", "t")
        assert gets.calls > first


async def test_a_watched_topic_is_read_again_only_when_it_changes(tmp_path: Path) -> None:
    """Issue 35 (one worker, 2 000 idle subscriptions): once its produce pointer and node are
    watched, a topic is not read every ``ttl_s`` but when one of them changes."""
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        await catalog_with_t(meta)
        cache = TopicCache(meta, ttl_s=0.05, watched_ttl_s=60.0)
        reads = _counted(meta, "children")  # a topic read lists the segments; watches do not
        await cache.get_topic("p", "t")
        await until(lambda: all(w.armed for w in cache._watches.values()), what="armed")
        await asyncio.sleep(0.06)  # past ttl_s: the read before may predate the watches
        await cache.get_topic("p", "t")  # read again, watched from now on
        before = reads.calls
        for _ in range(5):  # each ask past ttl_s: no read while nothing changed
            await asyncio.sleep(0.06)
            await cache.get_topic("p", "t")
        assert reads.calls == before

        pointer = paths.produce_pointer("p", "t")
        node = await meta.get(pointer)
        assert node is not None
        await meta.update(pointer, node.data, expected_version=node.version)  # a cutover's move
        watch = cache._watches[("p", "t")]
        generation = watch.generation
        await until(lambda: watch.generation > generation, what="the pointer's watch to fire")
        await cache.get_topic("p", "t")
        assert reads.calls > before  # read afresh
        await cache.aclose()
        assert watch.task.done()


async def test_a_change_to_segment_records_alone_reaches_a_watched_topic(tmp_path: Path) -> None:
    """Issue 35: a watched topic used to be read again every 5 s for the changes that move
    neither its node nor its produce pointer (an unsealed segment sealed, a retirement, a
    segment added): 200 topics were most of an idle worker's ZooKeeper requests. Those
    changes now rewrite the segments node, which the cache watches too."""
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        catalog = await catalog_with_t(meta)
        cache = TopicCache(meta, ttl_s=0.05, watched_ttl_s=60.0)
        await cache.get_topic("p", "t")
        await until(lambda: all(w.armed for w in cache._watches.values()), what="armed")
        await asyncio.sleep(0.06)  # past ttl_s: the read before may predate the watches
        first = (await cache.get_topic("p", "t")).segments[0]

        sealed = first.model_copy(update={"state": SegmentState.SEALED})
        await catalog.update_segment("p", "t", sealed)  # a failover's seal, a retirement
        await until(
            _answers(cache, lambda t: t.segments[0].state == SegmentState.SEALED),
            timeout=10,
            what="the sealed record",
        )
        added = segment("embedded", 2, SegmentState.PENDING, storage="s2", partitions=1)
        await catalog.add_segment("p", "t", added)  # a cutover's pending segment
        await until(_answers(cache, lambda t: len(t.segments) == 2), 10, "the added segment")
        await cache.aclose()


def _answers(cache: TopicCache, check: Callable[[Topic], bool]) -> Callable[[], Awaitable[bool]]:
    async def answered() -> bool:
        return check(await cache.get_topic("p", "t"))

    return answered


async def test_a_waiter_is_told_of_the_next_change_of_a_watched_topic(tmp_path: Path) -> None:
    """What lets an idle runner wait for a segment left behind without a look each second
    (``SegmentWalk._pause_behind``): a change after the generation taken wakes the waiter at
    once; one before it makes the wait return at once; unwatched, the wait is ``poll_s``."""
    async with EmbeddedMetaStore(str(tmp_path / "m.db")) as meta:
        await catalog_with_t(meta)
        cache = TopicCache(meta)
        assert cache.generation("p", "t") is None  # not watched yet
        t0 = time.monotonic()
        await cache.changed_since("p", "t", None, timeout=30, poll_s=0.1)
        assert time.monotonic() - t0 < 5
        await cache.get_topic("p", "t")
        await until(lambda: cache.generation("p", "t") is not None, what="the watches armed")
        generation = cache.generation("p", "t")

        async def change() -> None:
            await asyncio.sleep(0.3)
            pointer = paths.produce_pointer("p", "t")
            node = await meta.get(pointer)
            assert node is not None
            await meta.update(pointer, node.data, expected_version=node.version)

        t0 = time.monotonic()
        await asyncio.gather(change(), cache.changed_since("p", "t", generation, 30, 0.1))
        assert 0.25 < time.monotonic() - t0 < 10  # woken by the change, not the timeout
        t0 = time.monotonic()
        await cache.changed_since("p", "t", generation, 30, 0.1)  # it moved since: at once
        assert time.monotonic() - t0 < 1
        moved = cache.generation("p", "t")
        t0 = time.monotonic()
        await cache.changed_since("p", "t", moved, timeout=0.2, poll_s=0.1)  # no change
        assert 0.15 < time.monotonic() - t0 < 5
        await cache.aclose()

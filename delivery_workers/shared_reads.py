"""One read of a storage partition for every subscription of a worker that follows its tail.

Backends keep one reader per (storage topic, partition) in a process: Kafka a consumer behind a
lock, Pulsar a reader with a cursor. Many subscriptions of one topic on one worker would take
turns on it, each moving it to its own position and waiting up to a second for news at the
tail, so the hundredth subscription would wait a hundred seconds. :class:`SharedSegmentReader`
puts a :class:`Tail` in front of each partition instead:

- the tail keeps the messages it fetched last (up to ``keep``) and where its fetch stands;
- a read whose start lies in that window is answered from memory;
- a read at the tail's end joins the one fetch under way (started if none is), so however
  many subscriptions wait at the tail, one read of storage serves them all;
- a read elsewhere (a subscription catching up from behind, or after a seek) goes to storage
  directly, as before; a tail nobody has followed for ``IDLE_S`` moves to the next start.

Messages are the same objects for every subscription; they are immutable (``Stored`` is a
frozen dataclass), and each subscription holds its own scheduler and commit state.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Mapping

from core.model import Segment, Subscription, Topic
from core.tasks import cancel_all
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore, Stored
from segments.reader import SegmentReader

log = logging.getLogger(__name__)

FETCH_BATCH = 500
FETCH_WAIT_S = 1.0
IDLE_S = 3 * FETCH_WAIT_S  # a tail anyone follows fetches at least once per FETCH_WAIT_S


class Tail:
    """The shared tail of one storage partition (see the module doc)."""

    def __init__(self, store: SegmentStore, name: str, partition: int, keep: int) -> None:
        self.store = store
        self.name = name
        self.partition = partition
        self.keep = keep
        self.kept: deque[Stored] = deque()
        self.positions: deque[int] = deque()  # of ``kept``, for bisect
        self.end: int | None = None  # where the next fetch starts (exclusive end of kept)
        self._fetch: asyncio.Task[list[Stored]] | None = None
        self._fetched_at = time.monotonic()
        # Waiters for news (read_news): woken only by a fetch that brought messages or failed.
        self._news = asyncio.Event()
        self._waiting = 0
        self._follower: asyncio.Task[None] | None = None
        self._failed: BaseException | None = None

    def _cached(self, start: int, max_records: int) -> list[Stored] | None:
        """Messages from ``start`` out of memory; None if the window does not hold start."""
        if self.end is None or not self.positions:
            return None
        if not self.positions[0] <= start < self.end:
            return None
        i = bisect.bisect_left(self.positions, start)
        if i == len(self.kept):
            return None  # start lies in a gap after the last kept message: at the end
        return [self.kept[j] for j in range(i, min(len(self.kept), i + max_records))]

    async def read(self, start: int, max_records: int, timeout: float) -> list[Stored]:
        if self.end is None:
            self.end = start
        found = self._cached(start, max_records)
        if found:
            return found
        if start != self.end and self._fetch is None and self._idle():
            self._anchor(start)  # nobody follows this tail any more: move it here
        if start != self.end:
            # Behind the window (catching up) or ahead of the tail: a read of its own.
            return await self.store.read(
                self.name, self.partition, start, max_records=max_records, timeout=timeout
            )
        if self._fetch is None:
            self._fetch = asyncio.create_task(self._fetch_more())
        fetch = self._fetch
        await asyncio.wait({fetch}, timeout=timeout)  # a waiter's timeout never stops it
        if not fetch.done():
            return []
        batch = fetch.result()  # or the fetch's error, for every waiter
        # From the batch itself: it may be longer than the window keeps.
        i = bisect.bisect_left([m.position for m in batch], start)
        return batch[i : i + max_records]

    async def read_news(self, start: int, max_records: int, timeout: float) -> list[Stored]:
        """:meth:`read`, but at the tail's end it waits up to ``timeout`` for a fetch that
        brings messages: the tail fetches on (a read of at most ``FETCH_WAIT_S`` at a time)
        while anyone waits, and an empty fetch wakes nobody. So 2 000 idle subscriptions of
        a partition cost one fetch a second, not 2 000 wake-ups."""
        found = self._cached(start, max_records)
        if found or start != self.end or self.end is None:
            return found or await self.read(start, max_records, min(timeout, FETCH_WAIT_S))
        news = self._news
        self._waiting += 1
        if self._follower is None:
            self._follower = asyncio.create_task(self._follow())
        try:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await news.wait()
        finally:
            self._waiting -= 1
        if self._failed is not None and news.is_set():
            raise self._failed
        return self._cached(start, max_records) or []

    async def _follow(self) -> None:
        """Fetch while anyone waits for news; wake them at messages or an error."""
        try:
            while self._waiting:
                if self._fetch is None:
                    self._fetch = asyncio.create_task(self._fetch_more())
                fetch = self._fetch
                try:
                    batch = await asyncio.shield(fetch)
                except Exception as exc:  # every waiter is told; the next wait fetches again
                    self._tell(exc)
                    return
                if batch:
                    self._tell(None)
        finally:
            self._follower = None

    def _tell(self, failed: BaseException | None) -> None:
        self._failed = failed
        news, self._news = self._news, asyncio.Event()
        news.set()

    def _idle(self) -> bool:
        return time.monotonic() - self._fetched_at > IDLE_S

    def _anchor(self, start: int) -> None:
        self.kept.clear()
        self.positions.clear()
        self.end = start

    async def _fetch_more(self) -> list[Stored]:
        self._fetched_at = time.monotonic()
        try:
            assert self.end is not None
            batch = await self.store.read(
                self.name, self.partition, self.end, max_records=FETCH_BATCH, timeout=FETCH_WAIT_S
            )
            for msg in batch:
                self.kept.append(msg)
                self.positions.append(msg.position)
            if batch:
                self.end = batch[-1].position + 1
            while len(self.kept) > self.keep:
                self.kept.popleft()
                self.positions.popleft()
            return batch
        finally:
            self._fetch = None


class TopicCache(Catalog):
    """A :class:`Catalog` whose ``get_topic`` answers from memory, one read at a time per
    topic. Idle runners ask for their topic twice a second (is the segment sealed yet? did a
    failover leave one behind?), and a topic is four reads and more: with 0.5 s between
    reads, 2 000 idle subscriptions of 200 topics on one worker kept ZooKeeper busy with
    hundreds of requests a second (bench/idle_subs.py).

    So the first ask of a topic also watches its produce pointer, its own node and its
    segments node: a cutover commits, and a failover moves, the produce pointer in the same
    transaction as the segments, a migration rewrites the topic's node, and a change to
    segment records alone (an unsealed segment sealed later, a retirement, a segment added)
    rewrites the segments node (``Catalog.update_segment``, ``add_segment``); a watch firing
    drops the cached topic and the next ask reads it afresh. Until the watches are armed an
    answer is at most ``ttl_s`` old; after, at most ``watched_ttl_s``, a safety net for a
    writer that predates the segments node's rewrite (a rolling upgrade), which only delays
    an advance by that much: a topic's timeline only grows and its segments only move
    forward. With a 5 s re-read, 200 watched topics cost a worker ~140 ZooKeeper requests a
    second at idle (bench/idle_subs.py). A topic nobody asked for in ``forget_s`` stops
    being watched."""

    def __init__(
        self,
        store: MetaStore,
        ttl_s: float = 0.5,
        *,
        watched_ttl_s: float = 60.0,
        forget_s: float = 60.0,
    ) -> None:
        super().__init__(store)
        self.ttl_s = ttl_s
        self.watched_ttl_s = watched_ttl_s
        self.forget_s = forget_s
        # (read at, generation read under, watched when read, the read), by topic
        self._topics: dict[tuple[str, str], tuple[float, int, bool, asyncio.Task[Topic]]] = {}
        self._watches: dict[tuple[str, str], _TopicWatch] = {}
        self._swept_at = time.monotonic()

    async def get_topic(self, project: str, name: str) -> Topic:
        key, now = (project, name), time.monotonic()
        watch = self._watches.get(key)
        if watch is None or watch.task.done():  # a watch that failed is made again
            watch = self._watches[key] = _TopicWatch(self.store, project, name)
        watch.asked_at = now
        found = self._topics.get(key)
        if (
            found is None
            or now - found[0] > (self.watched_ttl_s if found[2] else self.ttl_s)
            or found[1] != watch.generation
            or (found[3].done() and found[3].exception() is not None)
        ):
            # Only a read begun once the watches were armed can rely on them.
            task = asyncio.ensure_future(super().get_topic(project, name))
            task.add_done_callback(_retrieved)
            found = self._topics[key] = (now, watch.generation, watch.armed, task)
        if now - self._swept_at > self.forget_s:
            self._sweep(now)
        return await asyncio.shield(found[3])

    def generation(self, project: str, name: str) -> int | None:
        """Where the topic's watch stands (None: not watched, or not armed yet); take it
        before a read, and :meth:`changed_since` returns at the next change after it."""
        watch = self._watches.get((project, name))
        return watch.generation if watch is not None and watch.armed else None

    async def changed_since(
        self, project: str, name: str, generation: int | None, timeout: float, poll_s: float
    ) -> None:
        """Until the topic changes after ``generation``, at most ``timeout`` seconds; at most
        ``poll_s`` if it was not watched then (its changes would not be told)."""
        watch = self._watches.get((project, name))
        if generation is None or watch is None or not watch.armed:
            await asyncio.sleep(min(timeout, poll_s))
            return
        moved = watch.moved
        if watch.generation != generation:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await moved.wait()

    def _sweep(self, now: float) -> None:
        self._swept_at = now
        for key in [k for k, w in self._watches.items() if now - w.asked_at > self.forget_s]:
            self._watches.pop(key).close()
            self._topics.pop(key, None)

    async def aclose(self) -> None:
        """Stop every watch."""
        watches, self._watches = list(self._watches.values()), {}
        for watch in watches:
            watch.close()
        await asyncio.gather(*(w.task for w in watches), return_exceptions=True)


def topic_generation(catalog: Catalog, project: str, name: str) -> int | None:
    """:meth:`TopicCache.generation` of a topic if ``catalog`` watches topics (None if it
    does not: its changes are not told, and a wait for one is a poll)."""
    if not isinstance(catalog, TopicCache):
        return None
    return catalog.generation(project, name)


class _TopicWatch:
    """Watches a topic's produce pointer, node and segments node; ``generation`` moves at
    each change, so a read begun before it is not taken as fresh; ``armed`` once every watch
    is set."""

    def __init__(self, store: MetaStore, project: str, name: str) -> None:
        self.generation = 0
        self.moved = asyncio.Event()  # set (and replaced) at each change
        self.armed = False
        self.asked_at = time.monotonic()
        watched = (
            paths.produce_pointer(project, name),
            paths.topic(project, name),
            paths.segments(project, name),
        )
        self.task = asyncio.ensure_future(self._follow(store, watched))
        self.task.add_done_callback(_ended)

    async def _follow(self, store: MetaStore, watched: tuple[str, ...]) -> None:
        first = asyncio.Event()
        started = 0

        async def one(path: str) -> None:
            nonlocal started
            seen = False
            async for _ in store.watch(path):
                if seen:
                    self.generation += 1  # a change: a read begun before it is stale
                    self.moved.set()
                    self.moved = asyncio.Event()
                    continue
                seen, started = True, started + 1
                if started == len(watched):
                    first.set()

        tasks = [asyncio.ensure_future(one(path)) for path in watched]
        try:
            await first.wait()
            self.armed = True
            await asyncio.gather(*tasks)
        finally:
            self.armed = False
            await cancel_all(tasks)

    def close(self) -> None:
        self.task.cancel()


def _ended(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.warning("a topic watch ended (the topic is read every ttl_s again): %r", exc)


def _retrieved(task: asyncio.Task[Topic]) -> None:
    if not task.cancelled():
        task.exception()  # read: a failed read nobody awaits is not logged as lost


class SharedSegmentReader(SegmentReader):
    """A :class:`SegmentReader` whose reads go through one :class:`Tail` per partition and
    whose topics come from a :class:`TopicCache`."""

    def __init__(
        self,
        catalog: Catalog,
        stores: Mapping[str, SegmentStore],
        *,
        keep: int = 2_000,
        max_tails: int = 2_000,
    ) -> None:
        super().__init__(TopicCache(catalog.store), stores)
        self.keep = keep
        self.max_tails = max_tails
        self._tails: OrderedDict[tuple[str, str, int], Tail] = OrderedDict()

    async def read(
        self,
        sub: Subscription,
        segment: Segment,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 1.0,
    ) -> list[Stored]:
        return await self._tail(segment, partition).read(start, max(1, max_records), timeout)

    async def read_news(
        self,
        sub: Subscription,
        segment: Segment,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 30.0,
    ) -> list[Stored]:
        return await self._tail(segment, partition).read_news(start, max(1, max_records), timeout)

    def _tail(self, segment: Segment, partition: int) -> Tail:
        key = (segment.cluster, segment.storage_topic, partition)
        tail = self._tails.get(key)
        if tail is None:
            tail = Tail(self.store(segment), segment.storage_topic, partition, self.keep)
            self._tails[key] = tail
            while len(self._tails) > self.max_tails:
                self._tails.popitem(last=False)  # the least recently read
        self._tails.move_to_end(key)
        return tail

    async def aclose(self) -> None:
        """Stop the topic watches."""
        assert isinstance(self.catalog, TopicCache)
        await self.catalog.aclose()

"""Topics, produce pointers and produce tokens in memory, kept fresh by metastore watches.

A publish costs no metastore read: the first request for a topic loads it and starts a
watch on its node, its produce pointer and its segments; every change reloads it. An unknown
topic is remembered as unknown for a short time, so a flood of bad requests does not become
a flood of metastore reads. A stale entry is harmless: a sealed segment's fence refuses the
write and the writer re-reads the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

from core.errors import MetaStoreUnavailable, NotFound
from core.model import ProduceToken, Topic
from core.schemas import CompiledSchema
from metastore import paths
from metastore.catalog import Catalog

from .schemas import TopicSchemas
from .single_flight import SingleFlight

log = logging.getLogger(__name__)
Key = tuple[str, str]
MAX_UNKNOWN = 10_000  # unknown topics remembered at once (see TopicCache._remember_unknown)


class TopicCache:
    def __init__(
        self, catalog: Catalog, unknown_ttl_s: float = 1.0, refresh_within_s: float | None = None
    ) -> None:
        self.catalog = catalog
        # The bound of :meth:`refresh`: a producer cut off from the metastore answers 503
        # instead of holding a refused write for as long as the partition lasts.
        self.refresh_within_s = refresh_within_s
        # Awaited when a topic is first loaded (the cutover participant reads its state).
        self.on_load: Callable[[Key], Awaitable[None]] | None = None
        self.unknown_ttl_s = unknown_ttl_s
        self._topics: dict[Key, Topic] = {}
        self._unknown: dict[Key, float] = {}
        self._loads: SingleFlight[Key, Topic] = SingleFlight(self._load)
        self._watches: dict[Key, list[asyncio.Task[None]]] = {}
        self._tokens: dict[Key, ProduceToken | None] = {}
        self.schemas = TopicSchemas(catalog)  # reloaded with the topic, by the same watches

    def schema(self, project: str, name: str) -> CompiledSchema | None:
        """The compiled schema in force of a loaded topic (None: no validation)."""
        return self.schemas.get((project, name))

    async def topic(self, project: str, name: str) -> Topic:
        """The topic from memory; loaded (once, however many ask at once) on first use."""
        key = (project, name)
        found = self._topics.get(key)
        if found is not None:
            return found
        if self._unknown.get(key, 0.0) > time.monotonic():
            raise NotFound(f"topic {project}/{name} does not exist")
        return await self._loads.get(key)

    def loaded(self) -> list[Topic]:
        """Every topic in memory."""
        return list(self._topics.values())

    def cached(self, project: str, name: str) -> bool:
        """Whether the topic is in memory (and watched)."""
        return (project, name) in self._topics

    async def refresh(self, project: str, name: str) -> Topic:
        """Read the topic again now (the writer calls this when a fence refuses a write),
        within ``refresh_within_s`` (else 503 ``metastore_unavailable``)."""
        if self.refresh_within_s is None:
            return await self._reload((project, name))
        try:
            async with asyncio.timeout(self.refresh_within_s):
                return await self._reload((project, name))
        except TimeoutError:
            raise MetaStoreUnavailable(
                f"topic {project}/{name}: its segment refused the write and the metastore did "
                f"not answer within {self.refresh_within_s:g} s with where to write now; retry",
                retry_after=1,
            ) from None

    async def _load(self, key: Key) -> Topic:
        topic = await self._reload(key)
        if key not in self._watches:
            self._watches[key] = [
                asyncio.create_task(self._follow(key, it)) for it in self._iterators(key)
            ]
            if self.on_load is not None:
                await self.on_load(key)
        return topic

    def _iterators(self, key: Key) -> list[AsyncIterator[object]]:
        p, t = key
        store = self.catalog.store
        return [
            store.watch(paths.topic(p, t)),
            store.watch(paths.produce_pointer(p, t)),
            store.watch_children(paths.segments(p, t)),
            store.watch(paths.topic_schema(p, t)),
        ]

    async def _reload(self, key: Key) -> Topic:
        try:
            topic, _ = await asyncio.gather(self.catalog.get_topic(*key), self.schemas.reload(key))
        except NotFound:
            self._forget(key)
            self._remember_unknown(key)
            raise
        self._topics[key] = topic
        self._unknown.pop(key, None)
        return topic

    def _remember_unknown(self, key: Key) -> None:
        """Remember ``key`` as unknown for a while. Callers choose the names (any token
        holder may try random topics), so expired entries are dropped once there are many."""
        now = time.monotonic()
        if len(self._unknown) >= MAX_UNKNOWN:
            self._unknown = {k: until for k, until in self._unknown.items() if until > now}
            if len(self._unknown) >= MAX_UNKNOWN:  # all fresh: a flood; forget the oldest half
                self._unknown = dict(list(self._unknown.items())[MAX_UNKNOWN // 2 :])
        self._unknown[key] = now + self.unknown_ttl_s

    async def _follow(self, key: Key, changes: AsyncIterator[object]) -> None:
        first = True
        async for _ in changes:
            if first:  # the watch's first value is the state we just loaded
                first = False
                continue
            try:
                await self._reload(key)
            except NotFound:
                return
            except Exception as exc:  # a failed reload keeps the old entry; the next change retries
                log.warning("reloading topic %s/%s failed: %s", *key, exc)

    def _forget(self, key: Key) -> None:
        self._topics.pop(key, None)
        self.schemas.forget(key)
        current = asyncio.current_task()
        for task in self._watches.pop(key, []):
            if task is not current:
                task.cancel()

    async def token(self, project: str, token_id: str) -> ProduceToken | None:
        """A produce token by id (cached; a deleted token stops working within one watch)."""
        key = (project, token_id)
        if key not in self._tokens:
            try:
                self._tokens[key] = await self.catalog.get_token(project, token_id)
            except NotFound:
                return None
            watch_key = ("token", f"{project}/{token_id}")
            if watch_key not in self._watches:
                self._watches[watch_key] = [asyncio.create_task(self._follow_token(key))]
        return self._tokens[key]

    async def _follow_token(self, key: Key) -> None:
        async for node in self.catalog.store.watch(paths.token(*key)):
            if node is None:
                self._tokens.pop(key, None)
                return
            self._tokens[key] = ProduceToken.model_validate_json(node.data)

    async def aclose(self) -> None:
        tasks = [t for group in self._watches.values() for t in group]
        self._watches.clear()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

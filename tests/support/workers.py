"""The world of the assignment tests: :func:`~tests.support.world.embedded_world` with an
Assigner in the test process and in-process Workers, each on a metastore session of its own
(its own connection to the one metastore file) and its own sender.

    async with workers_world(tmp_path) as world:
        await world.subscribe("s0")
        w1 = await world.worker("w1")
        await until(lambda: "p/s0" in w1.runners, what="s0 running on w1")
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from control_plane.assigner import Assigner
from delivery_workers.aiohttp_sender import AiohttpSender
from delivery_workers.worker import Worker
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from segments.protocol import Record, SegmentStore
from tests.support.hook import Hook
from tests.support.world import World, embedded_world, subscription


@dataclass
class WorkersWorld:
    file: str  # the metastore's SQLite file
    world: World
    stack: list[tuple[Worker, EmbeddedMetaStore, AiohttpSender]] = field(default_factory=list)

    @property
    def catalog(self) -> Catalog:
        return self.world.catalog

    @property
    def store(self) -> SegmentStore:
        return self.world.store

    @property
    def hook(self) -> Hook:
        return self.world.hook

    async def worker(self, member: str) -> Worker:
        """A started Worker named ``member``, stopped with the world (or :meth:`stop`)."""
        meta = EmbeddedMetaStore(self.file)
        await meta.start()
        sender = AiohttpSender()
        await sender.start()
        worker = Worker(
            meta, self.world.stores, sender, member, commit_every_s=0.1, lock_retry_s=0.1
        )
        await worker.start()
        self.stack.append((worker, meta, sender))
        return worker

    async def stop(self, worker: Worker) -> None:
        for entry in self.stack:
            if entry[0] is worker:
                self.stack.remove(entry)
                await worker.aclose()
                await entry[1].aclose()
                await entry[2].aclose()
                return

    async def subscribe(self, name: str, **fields: object) -> None:
        """Subscription ``name``, pushing to the hook's path ``name``."""
        sub = subscription(name, self.hook.url_for(name), **fields)
        await self.catalog.create_subscription(sub)

    async def produce(self, prefix: str, count: int) -> list[str]:
        """``count`` ungrouped messages ``<prefix>-<i>`` on segment 1."""
        ids = [f"{prefix}-{i}" for i in range(count)]
        for mid in ids:
            headers = (("x-message-id", mid.encode()),)
            await self.store.produce("st.1", Record(mid.encode(), key=None, headers=headers))
        return ids


@asynccontextmanager
async def workers_world(tmp_path: Path) -> AsyncIterator[WorkersWorld]:
    """Topic ``p/t`` (ungrouped, 3 partitions) with an Assigner; every worker stopped after."""
    async with embedded_world(tmp_path, partitions=3, grouped=False) as world:
        built = WorkersWorld(str(tmp_path / "meta.db"), world)
        async with Assigner(world.meta, world.catalog, "cp-1", interval_s=0.5):
            try:
                yield built
            finally:
                for worker, *_ in list(built.stack):
                    await built.stop(worker)


@pytest.fixture(name="world")
async def workers_world_fixture(tmp_path: Path) -> AsyncIterator[WorkersWorld]:
    """The ``world`` fixture of the assignment tests: ``from … import workers_world_fixture``."""
    async with workers_world(tmp_path) as built:
        yield built

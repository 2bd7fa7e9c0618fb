"""Assignment of subscriptions to delivery workers, by one elected leader.

Every control-plane process runs an :class:`Assigner`; the one that creates the ephemeral
node ``/leader/assigner`` is the leader, the others watch that node and stand for election
again when it vanishes (its owner closed, or its session expired).

The leader gives every subscription to one live member of the group ``workers`` by
rendezvous (highest-random-weight) hashing: a subscription goes to the worker whose hash of
``(worker, subscription)`` is highest, so a worker joining or leaving moves only the
subscriptions it wins or held, and every leader computes the same plan. It writes each
worker's sorted list of ``"project/subscription"`` to ``/assignments/{worker}`` (only when it
changed, by compare-and-set) and deletes the lists of workers that are gone. It recomputes
when the membership changes and every ``interval_s`` (subscriptions created or deleted).

The assignment says who *should* run a subscription; the ephemeral lock
``/locks/subscriptions/{project}:{s}`` held by the worker that runs it says who *does*, so two
workers never deliver one subscription at once while an assignment moves.

A subscription of N > 1 shards (:mod:`core.shards`) is N units, ``"project/sub#k"``:
the workers are ranked by the same hashing of ``"project/sub"`` and shard k goes to the k-th
of them (round robin), so its shards spread evenly over the workers and a worker joining or
leaving moves only the shards whose rank changed. The shard
count is fixed when a subscription is created; the leader reads it again every
``SHARDS_TTL_S`` (a subscription deleted and made again with another count is noticed then).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Iterable

from control_plane.leaders.election import LeaderElection
from core.errors import AlreadyExists, NotFound, VersionConflict
from core.shards import parse_unit_key, shards, unit_key
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)

WORKERS = "workers"
ROLE = "assigner"
SHARDS_TTL_S = 30.0


def _weight(worker: str, key: str) -> int:
    digest = hashlib.blake2b(f"{worker}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def rendezvous(keys: Iterable[str], workers: Iterable[str]) -> dict[str, list[str]]:
    """Each key given to the worker of highest weight; every worker listed, keys sorted.

    >>> rendezvous(["p/a"], ["w1"])
    {'w1': ['p/a']}
    """
    members = sorted(set(workers))
    plan: dict[str, list[str]] = {w: [] for w in members}
    if not members:
        return plan
    for key in sorted(set(keys)):
        plan[_owner(key, members)].append(key)
    return plan


def _owner(key: str, members: list[str]) -> str:
    """The worker of ``key``: of highest weight for it, or for a shard k of a subscription,
    the k-th (round robin) in the order of weight for the subscription's whole key, so its
    shards spread over as many workers as there are (a fair draw per shard would put two of
    two shards on one of two workers half of the time)."""
    project, name, index = parse_unit_key(key)
    if index is None:
        return max(members, key=lambda w: _weight(w, key))
    whole = f"{project}/{name}"
    ranked = sorted(members, key=lambda w: _weight(w, whole), reverse=True)
    return ranked[index % len(ranked)]


class Assigner(LeaderElection):
    """Leader election plus the assignment loop (see the module doc).

    Example::

        async with Assigner(metastore, Catalog(metastore), "cp-1"):
            ...  # while this runs, workers receive their subscriptions
    """

    def __init__(
        self,
        metastore: MetaStore,
        catalog: Catalog,
        member_id: str,
        interval_s: float = 2.0,
        *,
        group: str = WORKERS,
    ) -> None:
        super().__init__(metastore, ROLE, member_id)
        self.catalog = catalog
        self.interval_s = interval_s
        self.group = group
        self._shards: dict[str, tuple[int, float]] = {}  # "p/s" -> (shard count, read at)

    async def lead(self, lost: asyncio.Event) -> None:
        """Assign until the leader node is no longer ours."""
        dirty = asyncio.Event()
        watcher = asyncio.create_task(self._watch_members(dirty))
        try:
            while not lost.is_set():
                dirty.clear()
                await self.rebalance()
                await _first(dirty, lost, self.interval_s)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _watch_members(self, dirty: asyncio.Event) -> None:
        async for _ in self.metastore.watch_children(paths.members(self.group)):
            dirty.set()

    async def subscriptions(self) -> list[str]:
        """Every unit of assignment: ``"project/subscription"``, or one
        ``"project/subscription#k"`` per shard of a sharded one."""
        projects = await self.catalog.list_projects()
        names = await asyncio.gather(*(self.catalog.list_subscriptions(p) for p in projects))
        pairs = [(p, s) for p, subs in zip(projects, names, strict=True) for s in subs]
        counts = await asyncio.gather(*(self._shard_count(p, s) for p, s in pairs))
        self._shards = {
            k: v for k, v in self._shards.items() if k in {f"{p}/{s}" for p, s in pairs}
        }
        return [
            unit_key(p, s, shard)
            for (p, s), count in zip(pairs, counts, strict=True)
            for shard in shards(count)
        ]

    async def _shard_count(self, project: str, name: str) -> int:
        key, now = f"{project}/{name}", time.monotonic()
        cached = self._shards.get(key)
        if cached is not None and now - cached[1] < SHARDS_TTL_S:
            return cached[0]
        try:
            count = (await self.catalog.get_subscription(project, name)).shards
        except NotFound:  # deleted meanwhile: the next round drops it
            count = 1
        self._shards[key] = (count, now)
        return count

    async def rebalance(self) -> dict[str, list[str]]:
        """Compute the plan and write what changed; return the plan."""
        workers = await self.metastore.members(self.group)
        plan = rendezvous(await self.subscriptions(), workers)
        for worker, keys in plan.items():
            await self._write(worker, json.dumps(keys).encode())
        for gone in set(await self.metastore.children(paths.ASSIGNMENTS)) - set(plan):
            with contextlib.suppress(NotFound):
                await self.metastore.delete(paths.assignment(gone))
        return plan

    async def _write(self, worker: str, data: bytes) -> None:
        path = paths.assignment(worker)
        node = await self.metastore.get(path)
        # A lost race is settled by the next round (interval_s later, or sooner).
        with contextlib.suppress(AlreadyExists, VersionConflict, NotFound):
            if node is None:
                await self.metastore.create(path, data)
            elif node.data != data:
                await self.metastore.update(path, data, expected_version=node.version)


async def _first(a: asyncio.Event, b: asyncio.Event, timeout: float) -> None:
    """Wait until ``a`` or ``b`` is set, or ``timeout`` passes."""
    waits = [asyncio.create_task(a.wait()), asyncio.create_task(b.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

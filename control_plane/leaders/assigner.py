"""Assignment of subscriptions to delivery workers, by one elected leader.

Every control-plane process runs an :class:`Assigner`; the one that creates the ephemeral
node ``/leader/assigner`` is the leader, the others watch that node and stand for election
again when it vanishes (its owner closed, or its session expired).

The leader gives every subscription to one live member of the group ``workers`` by
rendezvous (highest-random-weight) hashing: a subscription goes to the worker whose hash of
``(worker, subscription)`` is highest, so a worker joining or leaving moves only the
subscriptions it wins or held, and every leader computes the same plan. It writes each
worker's sorted list of ``"project/subscription"`` to ``/assignments/{worker}`` (only when it
changed, by compare-and-set) and deletes the lists of workers that are gone. It looks again
when the membership changes and every ``interval_s`` (subscriptions created or deleted), and
plans and writes only when the units or the members differ from its last plan; every
``VERIFY_S`` it reads each worker's list back and mends what differs from the plan. A round
that changed nothing thus costs the listing of the names and the shard counts' refresh, no
plan, no encoding and no read of the lists (at 10^5 units, the plan and the lists' reads
held the event loop for tenths of a second every round; bench/scale.py). Members joining
are assigned once their joins have settled (:mod:`.join_settle`: at a
deployment's start the first member got every unit, then lost most of them join by join),
members leaving at once.

The assignment says who *should* run a subscription; the ephemeral lock
``/locks/subscriptions/{project}:{s}`` held by the worker that runs it says who *does*, so two
workers never deliver one subscription at once while an assignment moves.

A subscription of N > 1 shards (:mod:`core.shards`) is N units, ``"project/sub#k"``:
the workers are ranked by the same hashing of ``"project/sub"`` and shard k goes to the k-th
of them (round robin), so its shards spread evenly over the workers and a worker joining or
leaving moves only the shards whose rank changed. The shard
count is fixed when a subscription is created; the leader reads it once, and again when it
is older than ``SHARDS_TTL_S``, at most ``SHARDS_REFRESH_PER_ROUND`` a round, oldest first (a
subscription deleted and made again with another count within one round is noticed then:
``SHARDS_TTL_S`` seconds, plus up to N / ``SHARDS_REFRESH_PER_ROUND`` rounds for N
subscriptions).

The plan is kept between rounds (:class:`~.rendezvous.Planner`): a round in which nothing
changed hashes nothing, a member joining or leaving rehashes what it moves (bench/scale.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time

from control_plane.leaders.election import LeaderElection
from control_plane.leaders.join_settle import JoinSettle
from control_plane.leaders.rendezvous import Planner
from core.errors import AlreadyExists, NotFound, VersionConflict
from core.shards import shards, unit_key
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)

WORKERS = "workers"
ROLE = "assigner"
JOIN_QUIET_S = 1.0  # members joining are assigned once none joined for this long (join_settle)
JOIN_MOST_S = 10.0  # ... and at the latest this long after the first of them
SHARDS_TTL_S = 30.0
SHARDS_REFRESH_PER_ROUND = 200  # shard counts read again per round, oldest first
READ_BATCH = 512  # metastore reads in flight while shard counts are read
VERIFY_S = 30.0  # every worker's list read back and mended at least this often


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
        join_quiet_s: float = JOIN_QUIET_S,
    ) -> None:
        super().__init__(metastore, ROLE, member_id)
        self.catalog = catalog
        self.interval_s = interval_s
        self.group = group
        self._joins = JoinSettle(join_quiet_s, max(join_quiet_s, JOIN_MOST_S))
        self._shards: dict[str, tuple[int, float]] = {}  # "p/s" -> (shard count, read at)
        self._planner = Planner()  # the last plan, kept: the next one hashes what changed
        self._listed: list[tuple[str, list[str]]] = []  # (project, its subscriptions), last read
        self._units: list[str] = []  # the units of ``_listed``
        self._planned: tuple[frozenset[str], list[str]] | None = None  # members, units
        self._written: dict[str, bytes] = {}  # worker -> its list as last written or read
        self._verified_at = -VERIFY_S

    async def lead(self, lost: asyncio.Event) -> None:
        """Assign until the leader node is no longer ours."""
        dirty, listed = asyncio.Event(), asyncio.Event()
        self._joins.assigning()  # a leadership of its own: nothing seen yet
        self._planned, self._written = None, {}  # another leader may have written since
        watcher = asyncio.create_task(self._watch_members(dirty, listed))
        try:
            await _first(listed, lost, self.interval_s)  # the members as first listed
            while not lost.is_set():
                while (wait := self._joins.wait_s()) > 0 and not lost.is_set():
                    dirty.clear()  # members still joining (join_settle)
                    await _first(dirty, lost, wait)
                dirty.clear()
                self._joins.assigning()
                await self.rebalance()
                await _first(dirty, lost, self.interval_s)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)

    async def _watch_members(self, dirty: asyncio.Event, listed: asyncio.Event) -> None:
        """Mark the plan dirty on every change of the members, and tell the settle who
        joined and left. The first listing counts as joins: a leader elected while a
        deployment's workers are joining waits for them as well."""
        known: set[str] = set()
        async for names in self.metastore.watch_children(paths.members(self.group)):
            now = set(names)
            self._joins.saw(joined=bool(now - known), left=bool(known - now))
            known = now
            listed.set()
            dirty.set()

    async def subscriptions(self) -> list[str]:
        """Every unit of assignment: ``"project/subscription"``, or one
        ``"project/subscription#k"`` per shard of a sharded one."""
        projects = await self.catalog.list_projects()
        names = await asyncio.gather(*(self.catalog.list_subscriptions(p) for p in projects))
        listed = list(zip(projects, names, strict=True))
        recounted = await self._refresh_shard_counts()
        if listed == self._listed and not recounted:
            return self._units  # the same names and counts: the same units
        pairs = [(p, s) for p, subs in listed for s in subs]
        keys = [f"{p}/{s}" for p, s in pairs]
        await self._read_shard_counts(keys)
        self._listed = listed
        self._units = [
            unit_key(p, s, shard)
            for (p, s), key in zip(pairs, keys, strict=True)
            for shard in shards(self._shards[key][0])
        ]
        return self._units

    async def _read_shard_counts(self, listed: list[str]) -> None:
        """Forget the counts of subscriptions no longer listed and read those of the ones
        seen for the first time."""
        for gone in self._shards.keys() - set(listed):
            del self._shards[gone]
        await self._read_counts([k for k in listed if k not in self._shards])

    async def _refresh_shard_counts(self) -> bool:
        """Read again the shard counts of at most ``SHARDS_REFRESH_PER_ROUND`` subscriptions
        of those read longest ago (more than ``SHARDS_TTL_S``): a round costs the metastore
        what changed, not one read per subscription (10^5 of them every 30 s before). True
        when a count changed."""
        now, wanted = time.monotonic(), list[str]()
        for key, (_, at) in self._shards.items():  # oldest first (see _read_counts)
            if now - at < SHARDS_TTL_S or len(wanted) == SHARDS_REFRESH_PER_ROUND:
                break
            wanted.append(key)
        before = {k: self._shards[k][0] for k in wanted}
        await self._read_counts(wanted)
        return any(self._shards[k][0] != count for k, count in before.items())

    async def _read_counts(self, wanted: list[str]) -> None:
        """Read the shard counts of ``wanted``; each goes to the end of ``_shards``, which
        is thus in the order of reading, the oldest first."""
        now = time.monotonic()
        for start in range(0, len(wanted), READ_BATCH):
            batch = wanted[start : start + READ_BATCH]
            counts = await asyncio.gather(*(self._shard_count(k) for k in batch))
            for key, count in zip(batch, counts, strict=True):
                self._shards.pop(key, None)
                self._shards[key] = (count, now)

    async def _shard_count(self, key: str) -> int:
        project, name = key.split("/", 1)
        try:
            return await self.catalog.subscription_shards(project, name)
        except NotFound:  # deleted meanwhile: the next round drops it
            return 1

    async def rebalance(self) -> dict[str, list[str]] | None:
        """Compute the plan and write what changed; return the plan, or None when neither
        the units nor the members changed since the last one and no check is due."""
        workers = frozenset(await self.metastore.members(self.group))
        units = await self.subscriptions()
        verify = time.monotonic() - self._verified_at >= VERIFY_S
        if self._planned == (workers, units) and not verify:
            return None
        # In a thread: at 10^5 units a plan is tenths of a second of CPU, and the event
        # loop (the API's requests) gets the interpreter back every switch interval.
        plan = await asyncio.to_thread(self._planner.plan, units, workers)
        self._planned = None  # until every list is written (a failure: planned again)
        for worker, keys in plan.items():
            await self._write(worker, json.dumps(keys).encode(), verify=verify)
        for gone in set(await self.metastore.children(paths.ASSIGNMENTS)) - set(plan):
            self._written.pop(gone, None)
            with contextlib.suppress(NotFound):
                await self.metastore.delete(paths.assignment(gone))
        if self._written.keys() >= plan.keys():  # else a write lost a race: try it again
            self._planned = (workers, units)
            if verify:
                self._verified_at = time.monotonic()
        return plan

    async def _write(self, worker: str, data: bytes, *, verify: bool) -> None:
        if not verify and self._written.get(worker) == data:
            return  # the list as this leader last wrote it
        path = paths.assignment(worker)
        node = await self.metastore.get(path)
        # A lost race is settled by the next round (interval_s later, or sooner).
        self._written.pop(worker, None)
        with contextlib.suppress(AlreadyExists, VersionConflict, NotFound):
            if node is None:
                await self.metastore.create(path, data)
            elif node.data != data:
                await self.metastore.update(path, data, expected_version=node.version)
            self._written[worker] = data


async def _first(a: asyncio.Event, b: asyncio.Event, timeout: float) -> None:
    """Wait until ``a`` or ``b`` is set, or ``timeout`` passes."""
    waits = [asyncio.create_task(a.wait()), asyncio.create_task(b.wait())]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)

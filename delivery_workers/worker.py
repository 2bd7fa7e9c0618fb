"""A delivery worker: runs the subscriptions the control plane assigns to it.

A :class:`Worker` joins the group ``workers`` (an ephemeral member: it leaves when its session
ends) and watches its assignment ``/assignments/{member}``, a JSON list of
``"project/subscription"`` written by the leading control plane. For each subscription it
holds:

1. it takes the ephemeral lock ``/locks/subscriptions/{project}:{s}``. If the lock exists, the
   previous owner is still stopping, or it died and its session has not expired yet: the
   worker tries again every ``lock_retry_s``. So a subscription never runs on two workers,
   and a dead worker's subscriptions resume elsewhere once its session is gone, from the
   last committed positions;
2. it hands the subscription to :class:`~.running.Running`, which watches it and runs a
   :class:`SubscriptionRunner` while it exists and is not ``paused``, restarting the runner
   (from the committed positions) when the subscription's settings change;
3. it watches its lock: if the lock vanishes (a ZooKeeper session expired while the process
   stalled) it stops the runner at once and takes the lock again before going on.

While a seek request ``/seeks/{project}:{s}`` exists (the control plane is moving the
subscription's positions), the worker stops the runner, releases the lock and waits for the
request to go before taking the lock again; the control plane holds the lock meanwhile, so
the runner restarts from the positions the seek committed (one watch of ``/seeks`` serves
all the worker's units: :mod:`.seeks`). A paused subscription keeps its
lock but runs no runner; so does a disabled one (its endpoint failed every attempt for
``endpoint.disable_after_s``: :mod:`.disabling` decides and writes it, ``/enable`` clears
it). A :class:`StatusPublisher` writes each held subscription's figures
to ``/status/{project}:{s}`` for the control plane's status endpoint.

A sharded subscription (:mod:`core.shards`) is assigned shard by shard: a key
``"project/subscription#k"`` is held the same way, with its own lock and status node, and
runs a runner for that shard only; pause, settings changes and seeks apply to every shard.

The holder of a subscription (of its shard 0) also answers its test events, paused or
disabled too (:mod:`.sample_events`).

One slow endpoint cannot hold the worker: a subscription's deliveries in flight are capped
at ``max_in_flight_per_subscription`` (the service passes half the sender's connections)
whatever its own ``max_in_flight`` says, so an endpoint that holds every request for its
whole ``timeout_ms`` (up to 15 minutes) holds that many connections and no more; the rest of
the pool serves the other subscriptions.

When a subscription is unassigned the runner is stopped and the lock deleted. Stopping a
runner cancels its in-flight deliveries without a last commit: the next owner delivers again
what was delivered but not committed yet (at-least-once).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Mapping

from core.errors import HttpbusError
from core.lifecycle import AsyncResource
from core.shards import SEPARATOR, parse_unit_key
from core.tasks import TaskSet, cancel, stop_if_cancelled
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.audit import AuditSink
from segments.protocol import SegmentStore
from segments.subscription.layout import drop_layout

from . import sample_events
from .bodies import BodyCache
from .disabling import Disabling
from .fenced import FencedSender
from .notify import BACKOFF_S, Notifier
from .ops_events import TICK_S as OPS_TICK_S
from .ops_events import OpsEvents
from .runner import SubscriptionRunner
from .running import RunnerOptions, Running
from .seeks import SeekRequests
from .sender import EndpointSender
from .shared_reads import SharedSegmentReader
from .stats import RunnerStats
from .status import StatusPublisher
from .unit_lock import UnitLock, until_node

log = logging.getLogger(__name__)

GROUP = "workers"
_RELEASE_TIMEOUT_S = 5.0


class Worker(AsyncResource):
    """Runs the subscriptions assigned to ``member_id`` (see the module doc).

    Example::

        async with AiohttpSender() as sender, Worker(meta, stores, sender, "w-1"):
            await asyncio.Event().wait()  # deliver until cancelled
    """

    def __init__(
        self,
        metastore: MetaStore,
        stores: Mapping[str, SegmentStore],
        sender: EndpointSender,
        member_id: str,
        *,
        audit: AuditSink | None = None,
        member_data: bytes = b"{}",
        commit_every_n: int = 500,
        commit_every_s: float = 1.0,
        lock_retry_s: float = 0.5,
        error_retry_s: float = 1.0,
        status_interval_s: float = 1.0,
        notify_backoff_s: tuple[float, ...] = BACKOFF_S,
        clock: Callable[[], float] = time.time,
        max_in_flight_per_subscription: int | None = None,
    ) -> None:
        self.metastore = metastore
        self.catalog = Catalog(metastore)
        self.stores = stores
        self.sender = sender
        # What the runners send through: nothing leaves while the session's lease is lapsed.
        self.fenced = FencedSender(sender, metastore.lease)
        self.member_id = member_id
        self.audit = audit
        self.member_data = member_data
        self.lock_retry_s = lock_retry_s
        self.error_retry_s = error_retry_s
        self._owned: dict[str, asyncio.Task[None]] = {}
        self._follow: asyncio.Task[None] | None = None
        self._sampling: asyncio.Task[None] | None = None  # answers test events
        self._samples = TaskSet()  # test events being sent
        self._holding: set[str] = set()  # subscriptions whose lock this worker holds
        self._orphans = TaskSet()  # releases of orphaned locks
        self.seeks = SeekRequests(metastore)  # one watch of /seeks for every unit
        self.disabling = Disabling(
            self.catalog,
            member_id,
            Notifier(self.catalog, sender, backoff_s=notify_backoff_s),
            audit=audit,
            clock=clock,  # epoch seconds: how long an endpoint has failed
        )
        options = RunnerOptions(
            commit_every_n, commit_every_s, error_retry_s, max_in_flight_per_subscription
        )
        # One read per storage partition for every subscription at its tail (shared_reads).
        reader = self.reader = SharedSegmentReader(self.catalog, stores)
        self.running = Running(metastore, self.catalog, stores, reader, self.fenced,
                               BodyCache(), self.disabling, member_id, audit, options)  # fmt: skip
        # The two loops below share one sample of their period.
        self._sample = StatsSample(self.stats, 0.9 * min(status_interval_s, OPS_TICK_S))
        self.ops_events = OpsEvents(
            self.catalog, self.disabling.notifier, self._sample, self.disabling, member_id, clock
        )
        self._ops: asyncio.Task[None] | None = None  # tells the operational events
        self.status = StatusPublisher(
            metastore, member_id, self._sample, self.holding, interval_s=status_interval_s
        )

    @property
    def assigned(self) -> set[str]:
        """The subscriptions assigned to this worker (held or waiting for their lock)."""
        return set(self._owned)

    @property
    def runners(self) -> dict[str, SubscriptionRunner]:
        """The runners running now, by "project/sub" (or its shard's key)."""
        return self.running.runners

    def disabled(self) -> set[str]:
        """The held subscriptions (shards) that are disabled."""
        return self.running.disabled & self._holding

    def holding(self) -> set[str]:
        """The subscriptions whose lock this worker holds (running, or paused)."""
        return set(self._holding)

    def stats(self) -> dict[str, RunnerStats]:
        """Counters per subscription since this worker started, over all its runners."""
        return self.running.stats(self.disabled())

    def _answers_tests(self, project: str, name: str) -> bool:
        """Whether this worker answers the subscription's test events: it holds the
        subscription whole, or its shard 0."""
        whole = f"{project}/{name}"
        return whole in self._holding or f"{whole}{SEPARATOR}0" in self._holding

    async def start(self) -> None:
        """Join the group ``workers`` and follow this worker's assignment."""
        await self.metastore.join(GROUP, self.member_id, self.member_data)
        await self.seeks.start()
        self._follow = asyncio.create_task(self._follow_assignment())
        events = sample_events.serve(
            self.catalog, self.fenced, self.member_id, self._answers_tests, self._samples
        )
        self._sampling = asyncio.create_task(events)
        self._ops = asyncio.create_task(self.ops_events.run())
        await self.status.start()

    async def aclose(self) -> None:
        """Stop every runner and release every lock (the membership ends with the store)."""
        await cancel(self._follow)
        self._follow = None
        await cancel(self._sampling)
        await cancel(self._ops)
        await self._samples.aclose()
        await self._disown(list(self._owned))
        await self.disabling.aclose()
        await self.status.aclose()
        await self.reader.aclose()  # its topic watches
        await self.seeks.aclose()

    # ------------------------------------------------------------ assignment
    async def _follow_assignment(self) -> None:
        async for node in self.metastore.watch(paths.assignment(self.member_id)):
            try:
                wanted = set(json.loads(node.data)) if node is not None else set()
            except (ValueError, TypeError):
                log.error("unreadable assignment of %s: %r", self.member_id, node)
                continue
            await self._disown([key for key in self._owned if key not in wanted])
            for key in sorted(wanted - self._owned.keys()):
                self._owned[key] = asyncio.create_task(self._own(key), name=f"own-{key}")

    async def _disown(self, keys: list[str]) -> None:
        tasks = [self._owned.pop(key) for key in keys]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for key in keys:  # its next owner reads the recorded streak back
            self.disabling.watches.pop(key, None)
        await _drop_deleted(self.metastore, self.stores, keys)

    async def _own(self, key: str) -> None:
        """Hold subscription (shard) ``key`` until cancelled (unassigned or the worker
        closes)."""
        project, name, _ = parse_unit_key(key)
        while True:
            try:
                await until_node(self.metastore, paths.subscription(project, name), present=True)
                await self.seeks.until(paths.seek_request(project, name), present=False)
                lock = UnitLock(self.metastore, self.member_id, paths.unit_lock(key),
                                self._orphans, self.lock_retry_s)  # fmt: skip
                await lock.acquire()
                self._holding.add(key)
                try:
                    # Fenced (the lease lapsed) but still ours once the session is confirmed
                    # again: go on with the same lock. Giving up and retaking thousands of
                    # locks on every stall of a loaded worker fed the stall (bench/scale.py).
                    while await self._serve(key, project, name, lock):
                        if not await lock.until_ours_again():
                            break
                finally:
                    self._holding.discard(key)
                    try:
                        async with asyncio.timeout(_RELEASE_TIMEOUT_S):
                            await lock.release()
                    except (HttpbusError, TimeoutError):  # kept, it would block the next owner
                        lock.abandon()
            except Exception as exc:  # the metastore is down, a bug: keep it owned
                stop_if_cancelled(exc)  # unassigned: the error is its clean-up's
                log.exception("worker %s: subscription %s failed; retrying", self.member_id, key)
                await asyncio.sleep(self.error_retry_s)

    async def _serve(self, key: str, project: str, name: str, lock: UnitLock) -> bool:
        """Run the subscription until it is deleted or a seek begins (False), or the lock
        is fenced off (True)."""
        fenced = asyncio.create_task(lock.until_fenced())
        others = [
            asyncio.create_task(self.running.follow(key, project, name)),
            asyncio.create_task(_until_seek(self.seeks, self.member_id, project, name)),
        ]
        try:
            done, _ = await asyncio.wait([fenced, *others], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # an error of any is raised here
            return fenced in done
        finally:
            if fenced.done() and not fenced.cancelled() and (runner := self.runners.get(key)):
                runner.abandon()  # its next owner may be delivering already
            for task in [fenced, *others]:
                task.cancel()
            await asyncio.gather(fenced, *others, return_exceptions=True)


async def _drop_deleted(
    metastore: MetaStore, stores: Mapping[str, SegmentStore], keys: list[str]
) -> None:
    """Units unassigned because their subscription was deleted: its internal topics go too.

    The subscriptions are read in one bulk read: one read each, in turn, held the assignment's
    follower for tens of seconds when a start's churn moved thousands of units away from a
    member (bench/scale.py), and its newer assignment waited behind them."""
    if not keys:
        return
    names = list(dict.fromkeys(parse_unit_key(key)[:2] for key in keys))  # shards: once
    try:
        nodes = await metastore.get_many([paths.subscription(p, n) for p, n in names])
    except HttpbusError as exc:  # orphans cost storage only; say so
        log.warning("could not read the subscriptions of %d units: %s", len(names), exc)
        return
    for (project, name), node in zip(names, nodes, strict=True):
        if node is not None:
            continue
        try:
            await drop_layout(metastore, stores, project, name)
        except HttpbusError as exc:
            log.warning("could not drop the internal topics of %s/%s: %s", project, name, exc)


async def _until_seek(seeks: SeekRequests, member_id: str, project: str, name: str) -> None:
    """Until a seek of the subscription is requested: its runner steps aside for it."""
    path = paths.seek_request(project, name)
    await seeks.until(path, present=True)
    log.info("worker %s: %s; stepping aside", member_id, path)


class StatsSample:
    """``stats()`` shared by the loops that sample it each second (the status nodes and the
    operational events): computed at most once per ``max_age_s``, under their period. Each
    loop computed every held subscription's figures on its own, 4 000 a second at 2 000 idle
    subscriptions: 7 % of an idle worker's event loop (bench/idle_subs.py, with and without).
    Callers that want the figures of this instant (``/metrics``, tests) call
    ``Worker.stats`` itself."""

    def __init__(
        self,
        stats: Callable[[], dict[str, RunnerStats]],
        max_age_s: float = 0.9,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stats = stats
        self.max_age_s = max_age_s
        self.clock = clock
        self._taken = float("-inf")
        self._figures: dict[str, RunnerStats] = {}

    def __call__(self) -> dict[str, RunnerStats]:
        now = self.clock()
        if now - self._taken >= self.max_age_s:
            self._figures, self._taken = self.stats(), now
        return self._figures

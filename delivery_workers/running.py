"""Running one subscription (shard) a worker holds: :class:`Running` follows its record and
runs a :class:`SubscriptionRunner` while it exists and is neither paused nor disabled,
restarting the runner (from the committed positions) when its settings change or it
crashes, and adding each finished runner's counters to the subscription's totals. While it
is paused or disabled, the count of its DLQ is kept true without a runner
(:func:`.dlq_count.follow_idle`).

The :class:`~.worker.Worker` decides what is held (assignment, locks, fencing) and hands
each held key to :meth:`Running.follow`; nothing here takes or releases a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from core.errors import HttpbusError, NotFound
from core.model import Subscription
from core.shards import WHOLE, Shard, parse_unit_key
from core.tasks import stop_if_cancelled
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.audit import AuditSink
from segments.protocol import SegmentStore
from segments.subscription.layout import drop_layout

from .audit import pause_event
from .bodies import BodyCache
from .disabling import Disabling
from .dlq_count import follow_idle
from .fenced import FencedSender
from .poison import RunnerCrashes
from .runner import SubscriptionRunner
from .shared_reads import SharedSegmentReader
from .stats import RunnerStats, Totals
from .tracking import CommitPolicy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunnerOptions:
    """What every runner of a worker is made with."""

    commit_every_n: int = 500
    commit_every_s: float = 1.0
    error_retry_s: float = 1.0
    max_in_flight: int | None = None  # per subscription, whatever its own setting says


@dataclass(eq=False)
class Running:
    """The runners of one worker, by unit key ("project/sub" or "project/sub#k")."""

    metastore: MetaStore
    catalog: Catalog
    stores: Mapping[str, SegmentStore]
    reader: SharedSegmentReader  # shared by every runner (shared_reads)
    sender: FencedSender
    bodies: BodyCache  # one parse of a shared read for every body filter
    disabling: Disabling
    member_id: str
    audit: AuditSink | None
    options: RunnerOptions
    runners: dict[str, SubscriptionRunner] = field(default_factory=dict, init=False)
    totals: Totals = field(default_factory=Totals, init=False)  # over restarts
    disabled: set[str] = field(default_factory=set, init=False)  # keys seen disabled
    _tasks: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _crashes: dict[str, RunnerCrashes] = field(default_factory=dict, init=False)

    def stats(self, held_disabled: set[str]) -> dict[str, RunnerStats]:
        """Counters per subscription since the worker started, over all its runners, and
        for ``held_disabled`` (held, disabled: no runner) too."""
        out: dict[str, RunnerStats] = {}
        for key in self.totals.keys() | self.runners.keys() | held_disabled:
            runner = self.runners.get(key)
            total = self.totals.combined(key, runner.stats if runner else None)
            total.oldest_unacked_ms = runner.oldest_unacked_ms() if runner else None
            total.disabled = key in self.disabled
            total.failing_s = self.disabling.failing_for(key)
            total.disablings = self.disabling.disabled_total.get(key, 0)
            out[key] = total
        return out

    async def follow(self, key: str, project: str, name: str) -> None:
        """(Re)start the runner as the subscription changes; return when it is deleted."""
        current: bytes | None = None
        paused: bool | None = None
        disabled: bool | None = None
        try:
            async for node in self.metastore.watch(paths.subscription(project, name)):
                if node is None:
                    await self.stop(key)
                    if current is not None:  # deleted while we held it: drop its topics
                        await self._drop(project, name)
                    return
                if node.data == current:
                    continue
                current = node.data
                await self.stop(key)
                sub = Subscription.model_validate_json(node.data)
                if sub.paused != paused and (sub.paused or paused is not None):
                    # A pause is no loss: the reconciliation stops its clock meanwhile, per
                    # shard (each shard's runner stops and starts on its own).
                    if self.audit is not None:  # paused, or resumed
                        self.audit.emit(pause_event(sub, parse_unit_key(key)[2]))
                paused = sub.paused
                if disabled and sub.disabled is None:  # enabled again
                    self.disabling.enabled(key, sub)
                disabled = sub.disabled is not None
                if disabled:
                    self.disabled.add(key)
                else:
                    self.disabled.discard(key)
                if not sub.paused and not disabled:
                    self._tasks[key] = asyncio.create_task(self._run(key, project, name))
                else:  # no runner counts its DLQ: keep the count true meanwhile
                    self._tasks[key] = asyncio.create_task(self._count_idle(key, sub))
        finally:
            self.disabled.discard(key)
            await self.stop(key)

    async def _count_idle(self, key: str, sub: Subscription) -> None:
        """Follow the DLQ of a held subscription no runner runs (.dlq_count)."""
        count = self.totals.dlq_of(key)
        try:
            shard = shard_of(sub, parse_unit_key(key)[2])
        except HttpbusError:  # an assignment older than the subscription: the next fixes it
            return
        await follow_idle(count, self.metastore, self.stores, sub, shard)

    async def _drop(self, project: str, name: str) -> None:
        await drop_layout(self.metastore, self.stores, project, name)
        with contextlib.suppress(NotFound):
            await self.metastore.delete(paths.endpoint_failing(project, name))

    async def stop(self, key: str) -> None:
        task = self._tasks.pop(key, None)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self, key: str, project: str, name: str) -> None:
        """Deliver until cancelled, starting over (from the committed positions) on errors;
        a message the runner fails on again and again is dead-lettered (:mod:`.poison`)."""
        crashes = self._crashes.setdefault(key, RunnerCrashes())
        options = self.options
        backoff = RestartBackoff(options.error_retry_s)
        while True:
            runner: SubscriptionRunner | None = None
            backoff.started()
            try:
                sub = await self.catalog.get_subscription(project, name)
                health = await self.disabling.watch(key, sub)
                runner = SubscriptionRunner(
                    sub,
                    self.reader,
                    self.sender,
                    audit=self.audit,
                    commit_policy=CommitPolicy(options.commit_every_n, options.commit_every_s),
                    shard=shard_of(sub, parse_unit_key(key)[2]),
                    poisoned=crashes.poisoned,
                    health=health,
                    in_flight_cap=options.max_in_flight,
                    bodies=self.bodies,
                )
                runner.stats.latency = self.totals.latency_of(key)
                runner.stats.dlq = self.totals.dlq_of(key)
                self.runners[key] = runner
                await runner.run()
            except Exception as exc:
                stop_if_cancelled(exc)  # stopped: the error is its clean-up's, never restart
                log.exception("worker %s: runner of %s failed; restarting", self.member_id, key)
                crashes.record(exc, key)
                await asyncio.sleep(backoff.failed())
            finally:
                if runner is not None:
                    self._fold(key, runner)

    def _fold(self, key: str, runner: SubscriptionRunner) -> None:
        """Add a finished runner's counters to the totals of its subscription."""
        if self.runners.get(key) is runner:
            del self.runners[key]
        runner.stats.dlq.live = False  # kept as last counted until a runner counts again
        self.totals.fold(key, runner.stats)


@dataclass
class RestartBackoff:
    """How long a failed runner waits before it starts again: ``first_s``, doubled for each
    failure in a row up to ``most_s`` (a runner that ran ``steady_s`` starts the row over).

    ``most_s`` is 8 s, not more: a runner that fails through an outage (storage or the
    metastore away) starts again at most 8 s after the outage ends, inside the 15 s in
    which the chaos tests want delivery back (tests/chaos/checker.py).

    A runner that fails at once (storage away or not configured, its committed positions
    not read in time) used to start again every ``first_s`` for ever: 1 000 such units were
    a thousand restarts, tracebacks and metastore reads a second, most of a core
    (bench/scale.py), and at a worker's start they kept the loop from confirming its session."""

    first_s: float
    most_s: float = 8.0
    steady_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _row: int = 0
    _since: float = 0.0

    def started(self) -> None:
        self._since = self.clock()

    def failed(self) -> float:
        """The wait before the next start."""
        if self.clock() - self._since >= self.steady_s:
            self._row = 0
        self._row += 1
        return min(self.first_s * 2.0 ** (self._row - 1), max(self.first_s, self.most_s))


def shard_of(sub: Subscription, index: int | None) -> Shard:
    """The shard an assignment key names; an error if the subscription has no such shard
    (an assignment older than the subscription: the next one fixes it)."""
    if index is None and sub.shards == 1:
        return WHOLE
    if index is None or index >= sub.shards:
        raise HttpbusError(
            f"assignment of shard {index} does not match {sub.project}/{sub.name}, "
            f"which has {sub.shards} shards"
        )
    return Shard(index, sub.shards)

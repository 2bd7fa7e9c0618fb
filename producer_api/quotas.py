"""Per-project rate quotas, enforced by every producer process together (docs/quotas.md).

A publish never waits on the metastore once its project is known: it takes from a local
bucket whose rate is this process's *share* of the project's quota. In the background, about
once a second, :meth:`ProjectQuotas.refresh` writes this process's demand for each project it
publishes to (a :class:`~core.quotas.LeaseReport` in an ephemeral node), reads every
producer's, and retunes the buckets to the shares of :func:`core.quotas.share`. The quota
itself is watched: an admin's change applies within a watch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from core.errors import HttpbusError, Throttled
from core.model import Topic
from core.quotas import (
    BURST_S,
    DebtBucket,
    LeaseReport,
    ProjectQuota,
    RateQuota,
    combined_usage,
    rate_per_s,
    share,
)
from metastore import paths
from metastore.quotas import QuotaStore

from .limits import TopicLimits
from .single_flight import SingleFlight

log = logging.getLogger(__name__)
REFRESH_S = 1.0  # how often shares are recomputed (and demand reported)
IDLE_S = 30.0  # a project with no publish for this long is forgotten (its lease withdrawn)


@dataclass
class Budget:
    """One project's quota in this process: its buckets and what it saw since the last
    refresh."""

    project: str
    quota: ProjectQuota
    opened_at: float
    messages: DebtBucket | None = None
    bytes: DebtBucket | None = None
    asked: list[float] = field(default_factory=lambda: [0.0, 0.0])  # messages, bytes
    accepted: list[float] = field(default_factory=lambda: [0.0, 0.0])
    last_demand: tuple[float, float] = (0.0, 0.0)  # messages, bytes per second, last round
    since: float = 0.0
    used_at: float = 0.0
    reports: dict[str, LeaseReport] = field(default_factory=dict)
    throttled: dict[RateQuota, int] = field(default_factory=dict)
    watch: asyncio.Task[None] | None = None

    def take(self, messages: int, size: int, now: float) -> None:
        """Take from both buckets or from neither; ``Throttled`` naming the quota hit. A
        batch of more messages than the project's quota for one second is refused at once:
        it never fits. Bytes over a second of the quota pass into debt, in one message or in
        a batch alike (the topic's limits do the same, ``producer_api.limits``)."""
        self.used_at = now
        self._never_fits(messages, size)
        self.asked[0] += messages
        self.asked[1] += size
        wait = self.messages.take(messages, now) if self.messages is not None else 0.0
        hit = RateQuota.MESSAGES
        if wait == 0.0 and self.bytes is not None:
            wait = self.bytes.take(size, now)
            hit = RateQuota.BYTES
            if wait > 0.0 and self.messages is not None:
                self.messages.give_back(messages)
        if wait > 0.0:
            raise self._refusal(
                hit,
                lambda limit: (
                    f"project {self.project} is over its quota of {limit:g} "
                    f"{hit.unit} (all producers together); retry after {wait:.2f} s or ask an "
                    "admin to raise the quota"
                ),
                retry_after=wait,
            )
        self.accepted[0] += messages
        self.accepted[1] += size

    def _never_fits(self, messages: int, size: int) -> None:
        """``Throttled`` for a request of more messages than ``messages_per_second``. Its
        bytes are never refused so: a request of more bytes than ``bytes_per_second`` passes
        when the bucket is full and leaves it in debt, whether one message or a batch carries
        them, so the answer depends on the bytes, not on how they are split."""
        mps = self.quota.messages_per_second
        if mps is None or messages <= mps:
            return
        hit, amount = RateQuota.MESSAGES, f"{messages} messages"
        raise self._refusal(
            hit,
            lambda limit: (
                f"this request ({amount}) is more than project {self.project}'s "
                f"quota of {limit:g} {hit.unit} takes in one second: it can never fit; send "
                "smaller batches"
            ),
        )

    def _refusal(
        self, hit: RateQuota, why: Callable[[float], str], retry_after: float | None = None
    ) -> Throttled:
        """Count a refusal by quota ``hit`` and build its error, the message ``why(limit)``."""
        self.throttled[hit] = self.throttled.get(hit, 0) + 1
        limit = getattr(self.quota, hit.value)
        return Throttled(
            why(limit),
            retry_after=retry_after,
            details={"quota": hit.value, "project": self.project, "limit": limit},
        )

    def give_back(self, messages: int, size: int) -> None:
        """Return what a refused request took (a topic's own limit refused it)."""
        self.accepted[0] -= messages
        self.accepted[1] -= size
        if self.messages is not None:
            self.messages.give_back(messages)
        if self.bytes is not None:
            self.bytes.give_back(size)

    def retune(self, member: str, now: float) -> None:
        """Set the buckets to this member's shares of the quota, from ``reports``."""
        rates = (
            (RateQuota.MESSAGES, self.quota.messages_per_second, lambda r: r.demand_mps),
            (RateQuota.BYTES, self.quota.bytes_per_second, lambda r: r.demand_bps),
        )
        for kind, limit, demand in rates:
            attr = "messages" if kind is RateQuota.MESSAGES else "bytes"
            bucket: DebtBucket | None = getattr(self, attr)
            if limit is None:
                setattr(self, attr, None)
                continue
            part = share(limit, member, self.reports, demand)
            if bucket is None:
                setattr(self, attr, DebtBucket(part, BURST_S, now))
            else:
                bucket.retune(part, now)

    def report(self, now: float) -> LeaseReport:
        """This member's demand (the peak of this round and the last) and accepted rate
        since the last report; counters reset."""
        elapsed = now - self.since
        demand = (rate_per_s(self.asked[0], elapsed), rate_per_s(self.asked[1], elapsed))
        # The peak of two rounds: a round in which this process's clients were slow (a long
        # commit, a pause) does not hand its share to the others just as they come back.
        mps, bps = (max(d, last) for d, last in zip(demand, self.last_demand, strict=True))
        self.last_demand = demand
        report = LeaseReport(
            demand_mps=mps,
            demand_bps=bps,
            accepted_mps=rate_per_s(self.accepted[0], elapsed),
            accepted_bps=rate_per_s(self.accepted[1], elapsed),
            at_ms=int(time.time() * 1000),
        )
        self.asked = [0.0, 0.0]
        self.accepted = [0.0, 0.0]
        self.since = now
        return report


@dataclass(eq=False)
class ProjectQuotas:
    """The quotas of every project this producer publishes to. ``async with`` runs the
    background refresh; tests call :meth:`refresh` themselves with an injected clock."""

    store: QuotaStore
    member: str
    _: KW_ONLY
    clock: Callable[[], float] = time.monotonic
    refresh_s: float = REFRESH_S
    idle_s: float = IDLE_S
    budgets: dict[str, Budget] = field(default_factory=dict, init=False)
    _loads: SingleFlight[str, Budget] = field(init=False)
    _task: asyncio.Task[None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._loads = SingleFlight(self._load)

    async def admit(self, topic: Topic, messages: int, size: int, limits: TopicLimits) -> None:
        """Charge the project's quota, then the topic's own limits (giving the quota back
        if those refuse); ``Throttled`` when either is over."""
        budget = self.budgets.get(topic.project)
        if budget is None:
            budget = await self._budget(topic.project)
        if budget.messages is None and budget.bytes is None:
            limits.check(topic, messages, size)
            return
        budget.take(messages, size, self.clock())
        try:
            limits.check(topic, messages, size)
        except Throttled:
            budget.give_back(messages, size)
            raise

    async def _budget(self, project: str) -> Budget:
        return await self._loads.get(project)

    async def _load(self, project: str) -> Budget:
        """First publish to ``project`` here: read its quota, announce this member (with no
        demand yet, so it starts with the floor's share, not a whole quota), read the
        others, and watch the quota."""
        quota, _ = await self.store.get(project)
        now = self.clock()
        budget = Budget(project, quota, opened_at=now, since=now, used_at=now)
        if quota.limits_rate:
            await self.store.report(project, self.member, LeaseReport())
            budget.reports = await self.store.reports(project)
        budget.retune(self.member, now)
        budget.watch = asyncio.create_task(self._follow(budget))
        self.budgets[project] = budget
        return budget

    async def _follow(self, budget: Budget) -> None:
        first = True
        async for node in self.store.store.watch(paths.quota(budget.project)):
            if first:
                first = False
                continue
            try:
                quota = (
                    ProjectQuota.model_validate_json(node.data)
                    if node is not None and node.data
                    else ProjectQuota()
                )
            except ValueError as exc:
                log.warning("quota of project %s unreadable: %s", budget.project, exc)
                continue
            if quota != budget.quota:
                budget.quota = quota
                budget.retune(self.member, self.clock())

    async def refresh(self) -> None:
        """One round: report demand, read the others, retune; forget idle projects."""
        now = self.clock()
        for project, budget in list(self.budgets.items()):
            if now - budget.used_at > self.idle_s:
                await self._forget(project)
                continue
            if not budget.quota.limits_rate:
                budget.report(now)  # reset the counters; nothing to share
                continue
            try:
                await self.store.report(project, self.member, budget.report(now))
                budget.reports = await self.store.reports(project)
            except HttpbusError as exc:  # keep the last shares; the next round retries
                log.warning("quota lease of project %s not refreshed: %s", project, exc)
                continue
            budget.retune(self.member, self.clock())

    async def _forget(self, project: str) -> None:
        budget = self.budgets.pop(project)
        if budget.watch is not None:
            budget.watch.cancel()
        with contextlib.suppress(HttpbusError):
            await self.store.withdraw(project, self.member)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_s)  # a period, not a synchronisation
            try:
                await self.refresh()
            except Exception:  # never let the loop die: quotas would freeze at their shares
                log.exception("quota refresh failed")

    async def __aenter__(self) -> ProjectQuotas:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        tasks = [b.watch for b in self.budgets.values() if b.watch is not None]
        if self._task is not None:
            tasks.append(self._task)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.budgets.clear()


class QuotaCollector(Collector):
    """Per project and rate quota: the quota, this process's share, the combined accepted
    rate of every producer (from their last reports) and this process's 429s."""

    def __init__(self, quotas: ProjectQuotas) -> None:
        self.quotas = quotas

    def collect(self) -> Iterator[Any]:
        labels = ["project", "quota"]
        limit = GaugeMetricFamily(
            "httpbus_project_quota", "the project's rate quota (all producers)", labels=labels
        )
        mine = GaugeMetricFamily(
            "httpbus_project_quota_share", "this producer's share of the quota", labels=labels
        )
        used = GaugeMetricFamily(
            "httpbus_project_quota_usage",
            "accepted per second by all producers together (their last reports)",
            labels=labels,
        )
        refused = CounterMetricFamily(
            "httpbus_project_quota_throttled", "requests this producer refused", labels=labels
        )
        for project, budget in sorted(self.quotas.budgets.items()):
            for kind, bucket in (
                (RateQuota.MESSAGES, budget.messages),
                (RateQuota.BYTES, budget.bytes),
            ):
                quota = getattr(budget.quota, kind.value)
                if quota is None or bucket is None:
                    continue
                values = [project, kind.value]
                limit.add_metric(values, quota)
                mine.add_metric(values, bucket.rate)
                used.add_metric(values, combined_usage(budget.reports, kind))
                refused.add_metric(values, budget.throttled.get(kind, 0))
        yield from (limit, mine, used, refused)

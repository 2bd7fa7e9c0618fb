"""Operational events of the subscriptions a worker holds, for their projects'
``notification_url`` (:mod:`.notify`; docs/operations.md, "Operational events").

Nothing here is on a delivery's path: once a second :class:`OpsEvents` reads the figures the
worker keeps anyway (:meth:`.worker.Worker.stats`: the circuit's state, the dead-lettered
count, how long the endpoint has failed every attempt) and decides, per held subscription
(shard), what to tell:

- ``subscription.failing`` once a failure streak has lasted the project's
  ``failing_after_s`` (once per streak: it is named by the streak's start), and
  ``subscription.recovered`` at the first success after it;
- ``subscription.dead_lettered`` with the ``count`` of messages exhausted to the DLQ since the
  last one: at most one per subscription per ``interval_s`` (the first at once);
- ``subscription.circuit_opened`` when the circuit leaves ``closed``, and
  ``subscription.circuit_closed`` when it is back, **bounded against flapping**: an opening
  is told at most once per ``interval_s``; one that comes sooner is held until the interval
  has passed and is told then if the circuit is still not closed (with ``openings``: how
  many times it opened since the last notice), and a ``closed`` is told only after an
  ``opened`` was. So a flapping circuit costs its team at most two notices per interval,
  and a circuit that stays open is always told.

Quiet subscriptions cost nothing but the look at their figures; the project's settings are
read (cached ``PROJECT_TTL_S``) only for one with something to tell. The kinds a project does
not want are dropped by the notifier.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from core.errors import HttpbusError
from core.model import NoticeKind, Notifications
from core.shards import parse_unit_key
from metastore.catalog import Catalog

from .disabling import Disabling
from .notify import Notifier, iso
from .stats import RunnerStats

log = logging.getLogger(__name__)
TICK_S = 1.0
PROJECT_TTL_S = 10.0
CLOSED = "closed"


@dataclass
class Told:
    """What was told of one held subscription (shard)."""

    failing_since_s: float | None = None  # the streak a failing notice named
    dead_reported: int = 0  # the dead-lettered count told so far
    dead_told_s: float = float("-inf")
    dead_since_s: float | None = None  # the first exhausted message not told yet
    circuit_open: bool = False  # an opened notice was told, its closed not yet
    opened_told_s: float = float("-inf")
    last_state: str = CLOSED
    openings: int = 0  # openings seen since the last opened notice (told or not)
    opened_at_s: float = 0.0  # the first opening not told yet


@dataclass
class OpsEvents:
    """See the module doc: :meth:`tick` once a second (:meth:`run`)."""

    catalog: Catalog
    notifier: Notifier
    stats: Callable[[], Mapping[str, RunnerStats]]
    disabling: Disabling
    member_id: str
    clock: Callable[[], float] = time.time
    told: dict[str, Told] = field(default_factory=dict)
    _projects: dict[str, tuple[float, Notifications]] = field(default_factory=dict)

    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except HttpbusError as exc:  # the metastore is away: the next tick tries again
                log.warning("operational events: %s", exc)
            await asyncio.sleep(TICK_S)

    async def tick(self) -> None:
        now = self.clock()
        figures = self.stats()
        for key in list(self.told):
            if key not in figures:
                del self.told[key]  # no longer held: its next holder tells from here
        for key, stats in figures.items():
            told = self.told.setdefault(key, Told(dead_reported=stats.dead_lettered))
            if _quiet(told, stats):
                continue
            project, name, shard = parse_unit_key(key)
            wants = await self._settings(project, now)
            label: dict[str, object] = {} if shard is None else {"shard": shard}
            self._failing(told, key, project, name, label, wants, now)
            self._dead(told, stats, project, name, label, wants, now)
            self._circuit(told, stats, project, name, label, wants, now)

    async def _settings(self, project: str, now: float) -> Notifications:
        cached = self._projects.get(project)
        if cached is None or now - cached[0] > PROJECT_TTL_S:
            cached = (now, (await self.catalog.get_project(project)).notifications)
            self._projects[project] = cached
        return cached[1]

    def _tell(
        self,
        wants: Notifications,
        project: str,
        name: str,
        kind: NoticeKind,
        notice_id: str,
        **fields: object,
    ) -> None:
        """Hand the notice to the notifier, unless the project (as cached) does not want it:
        an unwanted kind costs no read (the notifier checks again, on a fresh read)."""
        if wants.wants(kind):
            self.notifier.notify(project, name, kind, notice_id, worker=self.member_id, **fields)

    def _failing(
        self,
        told: Told,
        key: str,
        project: str,
        name: str,
        label: dict[str, object],
        wants: Notifications,
        now: float,
    ) -> None:
        watch = self.disabling.watches.get(key)
        since = watch.streak.since_s if watch is not None else None
        if since is None:
            if told.failing_since_s is not None:  # the streak ended after it was told
                started = told.failing_since_s
                told.failing_since_s = None
                notice = f"recovered.{project}.{name}.{int(started * 1000)}"
                self._tell(
                    wants,
                    project,
                    name,
                    NoticeKind.RECOVERED,
                    notice,
                    failing_since=iso(started),
                    **label,
                )
            return
        if told.failing_since_s == since or now - since < wants.failing_after_s:
            return
        told.failing_since_s = since
        error = watch.last_error if watch is not None else None
        notice = f"failing.{project}.{name}.{int(since * 1000)}"
        self._tell(
            wants,
            project,
            name,
            NoticeKind.FAILING,
            notice,
            failing_since=iso(since),
            failing_for_s=round(now - since),
            last_error=error,
            **label,
        )

    def _dead(
        self,
        told: Told,
        stats: RunnerStats,
        project: str,
        name: str,
        label: dict[str, object],
        wants: Notifications,
        now: float,
    ) -> None:
        pending = stats.dead_lettered - told.dead_reported
        if pending <= 0:
            told.dead_reported = stats.dead_lettered  # a fresh runner's count: start over
            return
        if told.dead_since_s is None:
            told.dead_since_s = now
        if now - told.dead_told_s < wants.interval_s:
            return  # aggregated into the next one
        since = told.dead_since_s
        told.dead_reported, told.dead_told_s, told.dead_since_s = stats.dead_lettered, now, None
        notice = f"dead_lettered.{project}.{name}.{self.member_id}.{int(now * 1000)}"
        self._tell(
            wants,
            project,
            name,
            NoticeKind.DEAD_LETTERED,
            notice,
            count=pending,
            since=iso(since),
            until=iso(now),
            **label,
        )

    def _circuit(
        self,
        told: Told,
        stats: RunnerStats,
        project: str,
        name: str,
        label: dict[str, object],
        wants: Notifications,
        now: float,
    ) -> None:
        state = stats.circuit_state
        if state is None:  # no runner now (paused, disabled, restarting): nothing is known
            return
        if state != CLOSED and told.last_state == CLOSED:
            if told.openings == 0:
                told.opened_at_s = now
            told.openings += 1
        told.last_state = state
        if state == CLOSED:
            # Openings not told that closed again are counted in the next opened notice.
            if told.circuit_open:
                told.circuit_open = False
                notice = f"circuit_closed.{project}.{name}.{self.member_id}.{int(now * 1000)}"
                self._tell(wants, project, name, NoticeKind.CIRCUIT_CLOSED, notice, **label)
            return
        if told.circuit_open or now - told.opened_told_s < wants.interval_s:
            return
        openings, told.openings = told.openings, 0
        told.circuit_open, told.opened_told_s = True, now
        notice = f"circuit_opened.{project}.{name}.{self.member_id}.{int(now * 1000)}"
        self._tell(
            wants,
            project,
            name,
            NoticeKind.CIRCUIT_OPENED,
            notice,
            state=state,
            openings=max(openings, 1),
            opened_at=iso(told.opened_at_s),
            **label,
        )


def _quiet(told: Told, stats: RunnerStats) -> bool:
    """Nothing to look at: closed, nothing new dead-lettered, not failing, nothing told."""
    return (
        (stats.circuit_state or CLOSED) == CLOSED
        and told.last_state == CLOSED
        and not told.circuit_open
        and stats.dead_lettered == told.dead_reported
        and stats.failing_s is None
        and told.failing_since_s is None
    )

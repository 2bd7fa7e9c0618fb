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


@dataclass(frozen=True)
class Held:
    """One held subscription (shard) at one tick: its unit key, project, name and ``label``
    (its shard, for the notices), what was told of it, its figures, what its project wants."""

    key: str
    project: str
    name: str
    label: dict[str, object]
    told: Told
    stats: RunnerStats
    wants: Notifications
    now: float


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
            held = Held(key, project, name, label, told, stats, wants, now)
            self._failing(held)
            self._dead(held)
            self._circuit(held)

    async def _settings(self, project: str, now: float) -> Notifications:
        cached = self._projects.get(project)
        if cached is None or now - cached[0] > PROJECT_TTL_S:
            cached = (now, (await self.catalog.get_project(project)).notifications)
            self._projects[project] = cached
        return cached[1]

    def _tell(self, held: Held, kind: NoticeKind, notice_id: str, **fields: object) -> None:
        """Hand the notice to the notifier, unless the project (as cached) does not want it:
        an unwanted kind costs no read (the notifier checks again, on a fresh read)."""
        if held.wants.wants(kind):
            fields |= held.label
            self.notifier.notify(
                held.project, held.name, kind, notice_id, worker=self.member_id, **fields
            )

    def _failing(self, held: Held) -> None:
        told = held.told
        watch = self.disabling.watches.get(held.key)
        since = watch.streak.since_s if watch is not None else None
        if since is None:
            if told.failing_since_s is not None:  # the streak ended after it was told
                started = told.failing_since_s
                told.failing_since_s = None
                notice = f"recovered.{held.project}.{held.name}.{int(started * 1000)}"
                self._tell(held, NoticeKind.RECOVERED, notice, failing_since=iso(started))
            return
        if told.failing_since_s == since or held.now - since < held.wants.failing_after_s:
            return
        told.failing_since_s = since
        error = watch.last_error if watch is not None else None
        notice = f"failing.{held.project}.{held.name}.{int(since * 1000)}"
        self._tell(
            held,
            NoticeKind.FAILING,
            notice,
            failing_since=iso(since),
            failing_for_s=round(held.now - since),
            last_error=error,
        )

    def _dead(self, held: Held) -> None:
        told, dead_lettered, now = held.told, held.stats.dead_lettered, held.now
        pending = dead_lettered - told.dead_reported
        if pending <= 0:
            told.dead_reported = dead_lettered  # a fresh runner's count: start over
            return
        if told.dead_since_s is None:
            told.dead_since_s = now
        if now - told.dead_told_s < held.wants.interval_s:
            return  # aggregated into the next one
        since = told.dead_since_s
        told.dead_reported, told.dead_told_s, told.dead_since_s = dead_lettered, now, None
        notice = f"dead_lettered.{held.project}.{held.name}.{self.member_id}.{int(now * 1000)}"
        self._tell(
            held, NoticeKind.DEAD_LETTERED, notice, count=pending, since=iso(since), until=iso(now)
        )

    def _circuit(self, held: Held) -> None:
        told, state, now = held.told, held.stats.circuit_state, held.now
        if state is None:  # no runner now (paused, disabled, restarting): nothing is known
            return
        if state != CLOSED and told.last_state == CLOSED:
            if told.openings == 0:
                told.opened_at_s = now
            told.openings += 1
        told.last_state = state
        subject = f"{held.project}.{held.name}.{self.member_id}.{int(now * 1000)}"
        if state == CLOSED:
            # Openings not told that closed again are counted in the next opened notice.
            if told.circuit_open:
                told.circuit_open = False
                self._tell(held, NoticeKind.CIRCUIT_CLOSED, f"circuit_closed.{subject}")
            return
        if told.circuit_open or now - told.opened_told_s < held.wants.interval_s:
            return
        openings, told.openings = told.openings, 0
        told.circuit_open, told.opened_told_s = True, now
        self._tell(
            held,
            NoticeKind.CIRCUIT_OPENED,
            f"circuit_opened.{subject}",
            state=state,
            openings=max(openings, 1),
            opened_at=iso(told.opened_at_s),
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

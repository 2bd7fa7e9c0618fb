"""The operational events' decisions (delivery_workers.ops_events) on a clock of our own: a
flapping circuit costs at most two notices per interval and one that stays open is always
told; dead-lettered messages are told at once, then at most once per interval with the count
in between; a failing streak is told once, after failing_after_s, and its end once; shards
are named; quiet subscriptions read nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.model import NoticeKind, Notifications, Project
from delivery_workers.disabling import FailureStreak
from delivery_workers.ops_events import OpsEvents
from delivery_workers.stats import RunnerStats
from tests.support.clock import ManualClock

INTERVAL = 60


@dataclass
class Catalog:
    reads: int = 0

    async def get_project(self, name: str) -> Project:
        self.reads += 1
        wants = Notifications(events=tuple(NoticeKind), failing_after_s=30, interval_s=INTERVAL)
        return Project(name=name, notifications=wants)


@dataclass
class Notifier:
    told: list[tuple[str, str, NoticeKind, str, dict[str, Any]]] = field(default_factory=list)

    def notify(self, project: str, name: str, kind: NoticeKind, nid: str, **f: Any) -> None:
        self.told.append((project, name, kind, nid, f))

    def kinds(self) -> list[NoticeKind]:
        return [t[2] for t in self.told]


@dataclass
class Watch:
    streak: FailureStreak = field(default_factory=FailureStreak)
    last_error: str | None = "HTTP 503"


@dataclass
class Disabling:
    watches: dict[str, Watch] = field(default_factory=dict)


def _events(stats: dict[str, RunnerStats]) -> tuple[OpsEvents, Notifier, ManualClock, Disabling]:
    notifier, clock, disabling = Notifier(), ManualClock(1_000_000.0), Disabling()
    events = OpsEvents(Catalog(), notifier, lambda: stats, disabling, "w-1", clock)  # type: ignore[arg-type]
    return events, notifier, clock, disabling


async def test_a_flapping_circuit_is_bounded_and_a_lasting_one_is_told() -> None:
    stats = {"shop/s": RunnerStats(circuit_state="closed")}
    events, notifier, clock, _ = _events(stats)
    for second in range(3 * INTERVAL):  # flaps every second for three intervals
        stats["shop/s"].circuit_state = "open" if second % 2 == 0 else "closed"
        await events.tick()
        clock.now += 1
    told = notifier.kinds()
    opened = told.count(NoticeKind.CIRCUIT_OPENED)
    assert opened == 3 and told.count(NoticeKind.CIRCUIT_CLOSED) == 3  # two per interval
    later = [t[4]["openings"] for t in notifier.told if t[2] is NoticeKind.CIRCUIT_OPENED]
    assert later[0] == 1 and all(n > 1 for n in later[1:])  # the openings in between
    # It opens again within the interval and stays open: told once the interval has passed.
    notifier.told.clear()
    stats["shop/s"].circuit_state = "closed"
    await events.tick()
    stats["shop/s"].circuit_state = "half_open"
    for _ in range(INTERVAL + 1):
        clock.now += 1
        await events.tick()
    assert notifier.kinds() == [NoticeKind.CIRCUIT_OPENED]
    assert notifier.told[0][4]["state"] == "half_open"
    # Its runner stops (paused, disabled): no state is known, so no `closed` is made up.
    stats["shop/s"].circuit_state = None
    clock.now += INTERVAL
    await events.tick()
    assert notifier.kinds() == [NoticeKind.CIRCUIT_OPENED]


async def test_dead_letters_are_aggregated_per_interval() -> None:
    stats = {"shop/s": RunnerStats(dead_lettered=5)}  # before this worker told anything
    events, notifier, clock, _ = _events(stats)
    await events.tick()
    assert notifier.told == []  # what was dead-lettered before is not news
    for _ in range(2 * INTERVAL + 5):
        stats["shop/s"].dead_lettered += 1  # one a second
        await events.tick()
        clock.now += 1
    counts = [t[4]["count"] for t in notifier.told]
    assert notifier.kinds() == [NoticeKind.DEAD_LETTERED] * 3
    assert counts == [1, INTERVAL, INTERVAL] and sum(counts) <= 2 * INTERVAL + 5
    assert len({t[3] for t in notifier.told}) == 3  # an id each


async def test_failing_is_told_once_per_streak_and_its_end_too() -> None:
    stats = {"shop/s#1": RunnerStats()}
    events, notifier, clock, disabling = _events(stats)
    watch = disabling.watches["shop/s#1"] = Watch()
    watch.streak.record(True, clock.now)
    stats["shop/s#1"].failing_s = 0.0
    for _ in range(40):
        clock.now += 1
        await events.tick()
    assert notifier.kinds() == [NoticeKind.FAILING]
    (project, name, _, nid, fields) = notifier.told[0]
    assert (project, name, fields["shard"], fields["last_error"]) == ("shop", "s", 1, "HTTP 503")
    assert fields["failing_for_s"] >= 30 and nid.startswith("failing.shop.s.")
    watch.streak.record(False, clock.now)
    stats["shop/s#1"].failing_s = None
    await events.tick()
    await events.tick()
    assert notifier.kinds() == [NoticeKind.FAILING, NoticeKind.RECOVERED]


async def test_quiet_subscriptions_read_nothing() -> None:
    stats = {f"shop/s{i}": RunnerStats(circuit_state="closed") for i in range(1_000)}
    events, notifier, _, _ = _events(stats)
    await events.tick()
    await events.tick()
    assert notifier.told == [] and events.catalog.reads == 0  # type: ignore[attr-defined]

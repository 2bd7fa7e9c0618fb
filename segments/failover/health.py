"""Is a topic's active segment writable? Producers measure, the leader judges (issue 20).

Each producer keeps, per segment it writes, a :class:`WriteHealth`: how many writes succeeded
and failed since its last report, their latency, the last success, and since when its writes
have failed without a success between (a write still unanswered after ``stall_s`` counts as
failing from the moment it began: a stopped broker answers nothing at all until the produce
timeout). About once a second it writes a :class:`HealthReport` per segment to the metastore
(an ephemeral node per producer and segment: aggregated figures, never one write per message).

The control plane's leader reads the reports and asks :class:`HealthJudge` whether the active
segment is unhealthy:

- **failing**: across producers, writes have failed for ``fail_after_s`` (default 5 s) — the
  failure began at the later of the first failure of a producer still failing and the last
  success of any producer, so one producer that still writes keeps the segment;
- **slow** (off unless ``latency_p99_ms`` is set): the p99 write latency some producer
  reported stayed above the bound for ``latency_for_s`` (BMQ's slow tail).

Example::

    health = WriteHealth(clock=lambda: 100.0)
    ticket = health.begin(key)
    health.end(ticket, WriteOutcome.FAILED)
    [report] = health.reports("producer-1")
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum

from pydantic import BaseModel, ConfigDict

SegmentKey = tuple[str, str, int]  # project, topic, segment id
MAX_SAMPLES = 4_096  # latencies kept per segment between two reports


class WriteOutcome(Enum):
    """How one write to a segment ended, as the segment's write health counts it."""

    OK = "ok"
    FAILED = "failed"  # storage unavailable or timed out: counts against the segment
    NEUTRAL = "neutral"  # refused for the message's own sake (too large, fenced, ...)


class HealthReport(BaseModel):
    """One producer's write figures of one segment since its previous report."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: str
    topic: str
    segment: int
    member: str
    at: float  # epoch seconds
    ok: int = 0
    failed: int = 0
    p99_ms: float | None = None  # of the writes answered in the window
    last_ok_at: float | None = None
    failing_since: float | None = None  # no success of this producer since then


@dataclass
class _Window:
    ok: int = 0
    failed: int = 0
    last_ok_at: float | None = None
    failing_since: float | None = None
    last_activity: float = 0.0
    latencies: list[float] | None = None

    def sample(self, latency_ms: float) -> None:
        if self.latencies is None:
            self.latencies = []
        if len(self.latencies) < MAX_SAMPLES:
            self.latencies.append(latency_ms)


def p99(samples: Iterable[float]) -> float | None:
    ordered = sorted(samples)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)]


class WriteHealth:
    """A producer's figures of every segment it writes (see the module doc)."""

    def __init__(
        self, *, stall_s: float = 1.0, idle_s: float = 10.0, clock: Callable[[], float] = time.time
    ) -> None:
        self.stall_s = stall_s
        self.idle_s = idle_s  # a segment not written for this long is reported no more
        self.clock = clock
        self._windows: dict[SegmentKey, _Window] = {}
        self._inflight: dict[int, tuple[SegmentKey, float]] = {}
        self._tickets = itertools.count()

    def begin(self, key: SegmentKey) -> int:
        ticket = next(self._tickets)
        self._inflight[ticket] = (key, self.clock())
        return ticket

    def end(self, ticket: int, outcome: WriteOutcome) -> None:
        found = self._inflight.pop(ticket, None)
        if found is None:
            return
        key, started = found
        now = self.clock()
        window = self._windows.get(key)
        if window is None:
            window = self._windows[key] = _Window()
        window.last_activity = now
        if outcome is WriteOutcome.OK:
            window.ok += 1
            window.last_ok_at = now
            window.failing_since = None
            window.sample(1000 * (now - started))
        elif outcome is WriteOutcome.FAILED:
            window.failed += 1
            window.sample(1000 * (now - started))
            if window.failing_since is None or started < window.failing_since:
                window.failing_since = started

    def reports(self, member: str) -> list[HealthReport]:
        """A report per segment written lately (and every segment with a write stalled);
        the window's counters start again."""
        now = self.clock()
        stalled: dict[SegmentKey, float] = {}
        for key, started in self._inflight.values():
            if now - started >= self.stall_s:
                stalled[key] = min(started, stalled.get(key, started))
        out = []
        for key in set(self._windows) | set(stalled):
            window = self._windows.setdefault(key, _Window(last_activity=now))
            since = window.failing_since
            if key in stalled:
                since = stalled[key] if since is None else min(since, stalled[key])
                window.last_activity = now
            if now - window.last_activity > self.idle_s:
                del self._windows[key]
                continue
            out.append(
                HealthReport(
                    project=key[0],
                    topic=key[1],
                    segment=key[2],
                    member=member,
                    at=now,
                    ok=window.ok,
                    failed=window.failed,
                    p99_ms=p99(window.latencies or ()),
                    last_ok_at=window.last_ok_at,
                    failing_since=since,
                )
            )
            window.ok = window.failed = 0
            window.latencies = None
        return out


@dataclass(frozen=True)
class Detection:
    """When the leader declares an active segment unhealthy (control plane settings)."""

    fail_after_s: float = 5.0
    latency_p99_ms: float | None = None  # None: the latency trigger is off
    latency_for_s: float = 30.0
    stale_s: float = 5.0  # reports older than this are ignored


class HealthJudge:
    """The leader's view of each active segment: healthy, failing or slow (module doc).
    Remembers since when each segment has been slow; a new leader starts afresh."""

    def __init__(self, detection: Detection) -> None:
        self.detection = detection
        self._slow_since: dict[SegmentKey, float] = {}

    def verdict(self, key: SegmentKey, reports: Iterable[HealthReport], now: float) -> str | None:
        """Why the segment is unhealthy, or None if it is not (or nothing says so)."""
        d = self.detection
        fresh = [r for r in reports if now - r.at <= d.stale_s]
        if not fresh:
            self._slow_since.pop(key, None)
            return None
        failing = [r.failing_since for r in fresh if r.failing_since is not None]
        last_ok = max((r.last_ok_at for r in fresh if r.last_ok_at is not None), default=None)
        if failing:
            began = min(failing) if last_ok is None else max(min(failing), last_ok)
            if now - began >= d.fail_after_s:
                return f"writes failed for {now - began:.1f}s across {len(fresh)} producer(s)"
        return self._slow(key, fresh, now)

    def _slow(self, key: SegmentKey, fresh: list[HealthReport], now: float) -> str | None:
        d = self.detection
        if d.latency_p99_ms is None:
            return None
        worst = max((r.p99_ms for r in fresh if r.p99_ms is not None), default=None)
        if worst is None or worst <= d.latency_p99_ms:
            self._slow_since.pop(key, None)
            return None
        since = self._slow_since.setdefault(key, now)
        if now - since >= d.latency_for_s:
            return (
                f"write latency p99 {worst:.0f} ms above {d.latency_p99_ms:.0f} ms "
                f"for {now - since:.1f}s"
            )
        return None

    def forget(self, key: SegmentKey) -> None:
        self._slow_since.pop(key, None)

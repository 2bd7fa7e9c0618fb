"""The figures of one subscription's delivery on this worker: what :mod:`.status` reports and
``/metrics`` shows; every part of a runner counts its own in them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from core.result import DeliveryResult

from .dlq_count import DlqCount
from .latency import LatencyHistogram


@dataclass
class RunnerStats:
    delivered: int = 0
    filtered: int = 0
    filter_errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    retried: int = 0
    dead_lettered: int = 0  # attempted, failed for good
    sidelined: int = 0  # into the DLQ unattempted, behind their group's failed head
    failed_commits: int = 0  # the storage was away; delivery went on (.commit)
    delayed: int = 0
    in_flight: int = 0
    held: int = 0
    blocked_groups: int = 0
    segment: int = 0
    circuit_state: str | None = None  # closed | open | half_open; None: no breaker
    circuit_rate: float | None = None  # attempts a second the circuit allows now
    lag: int | None = None  # messages of the consume segment not committed (every LAG_S)
    commit_failing_since_ms: int | None = None  # the first of the failed commits in a row
    oldest_unacked_ms: int | None = None  # storage time of the oldest read, not terminal
    disabled: bool = False  # its endpoint failed too long (.disabling); no runner runs
    failing_s: float | None = None  # how long its endpoint has failed every attempt
    disablings: int = 0  # the times this worker disabled it
    # Failed attempts by what came back: the HTTP status ("500") or why none did ("timeout").
    failures: dict[str, int] = field(default_factory=dict)
    # The newest failed attempt: {"at_ms", "status", "error", "answer"} (see record_failure).
    last_failure: dict[str, object] | None = None
    # Accepted -> 2xx; the worker hands each runner its subscription's (kept over restarts).
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    # What its DLQ holds (.dlq_count); the worker hands each runner its subscription's, so
    # the last count stays shown while no runner runs (paused, disabled).
    dlq: DlqCount = field(default_factory=DlqCount)


COUNTERS = (
    "delivered",
    "filtered",
    "filter_errors",
    "attempts",
    "failed_attempts",
    "retried",
    "dead_lettered",
    "sidelined",
    "failed_commits",
)
GAUGES = (  # of the runner running now; a stopped one shows the defaults
    "delayed",
    "in_flight",
    "held",
    "blocked_groups",
    "segment",
    "circuit_state",
    "circuit_rate",
    "lag",
    "commit_failing_since_ms",
)


class FailureStats(Protocol):
    failures: dict[str, int]
    last_failure: dict[str, object] | None


def record_failure(stats: FailureStats, result: DeliveryResult, at_ms: int) -> None:
    """Count a failed attempt by what came back and keep it as the newest failure, with the
    start of the endpoint's answer (what an operator reads first when a subscription fails)."""
    key = str(result.status) if result.status is not None else str(result.error_kind or "error")
    stats.failures[key] = stats.failures.get(key, 0) + 1
    stats.last_failure = {
        "at_ms": at_ms,
        "status": result.status,
        "error": result.error,
        "answer": result.answer,
    }


def _newest(*found: dict[str, object] | None) -> dict[str, object] | None:
    seen = [f for f in found if f is not None]
    return max(seen, key=lambda f: int(str(f.get("at_ms", 0)))) if seen else None


class Totals:
    """The counters of each subscription over its runners (one after the other: each
    restart starts a runner with fresh figures) and its latency, kept over restarts."""

    def __init__(self) -> None:
        self._totals: dict[str, RunnerStats] = {}
        self._latency: dict[str, LatencyHistogram] = {}
        self._dlq: dict[str, DlqCount] = {}

    def keys(self) -> set[str]:
        return set(self._totals)

    def latency_of(self, key: str) -> LatencyHistogram:
        """The histogram a new runner of ``key`` observes into."""
        return self._latency.setdefault(key, LatencyHistogram())

    def dlq_of(self, key: str) -> DlqCount:
        """The DLQ count a new runner of ``key`` keeps (its baseline scan resets it)."""
        return self._dlq.setdefault(key, DlqCount())

    def fold(self, key: str, finished: RunnerStats) -> None:
        """Add a finished runner's counters to the totals of ``key``."""
        total = self._totals.setdefault(key, RunnerStats())
        for name in COUNTERS:
            setattr(total, name, getattr(total, name) + getattr(finished, name))
        _merge_failures(total, finished)

    def combined(self, key: str, live: RunnerStats | None) -> RunnerStats:
        """The totals of ``key`` with the running runner's (``live``) figures. Sampled for
        every held subscription each second: with no earlier runner of ``key`` to add, the
        live figures are copied at once (the same figures, ~3x cheaper at 2 000 idle
        subscriptions)."""
        earlier = self._totals.get(key)
        if earlier is None and live is not None:
            total = object.__new__(RunnerStats)  # a copy of live, field for field
            total.__dict__.update(live.__dict__)
            total.failures = dict(live.failures)
        else:
            total = self._summed(earlier, live)
        total.latency = self._latency.get(key) or LatencyHistogram()
        total.dlq = self._dlq.get(key) or DlqCount()
        return total

    @staticmethod
    def _summed(earlier: RunnerStats | None, live: RunnerStats | None) -> RunnerStats:
        total = RunnerStats()
        for part in (earlier, live):
            if part is not None:
                for name in COUNTERS:
                    setattr(total, name, getattr(total, name) + getattr(part, name))
                _merge_failures(total, part)
        if live is not None:
            for name in GAUGES:
                setattr(total, name, getattr(live, name))
        return total


def _merge_failures(total: RunnerStats, part: RunnerStats) -> None:
    for key, count in part.failures.items():
        total.failures[key] = total.failures.get(key, 0) + count
    if part.last_failure is not None:
        total.last_failure = _newest(total.last_failure, part.last_failure)

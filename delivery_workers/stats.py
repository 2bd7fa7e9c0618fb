"""The figures of one subscription's delivery on this worker: what :mod:`.status` reports and
``/metrics`` shows; every part of a runner counts its own in them."""

from __future__ import annotations

from dataclasses import dataclass, field

from .latency import LatencyHistogram


@dataclass
class RunnerStats:
    delivered: int = 0
    filtered: int = 0
    filter_errors: int = 0
    attempts: int = 0
    failed_attempts: int = 0
    retried: int = 0
    dead_lettered: int = 0
    delayed: int = 0
    in_flight: int = 0
    held: int = 0
    blocked_groups: int = 0
    segment: int = 0
    circuit_state: str | None = None  # closed | open | half_open; None: no breaker
    circuit_rate: float | None = None  # attempts a second the circuit allows now
    lag: int | None = None  # messages of the consume segment not committed (every LAG_S)
    oldest_unacked_ms: int | None = None  # storage time of the oldest read, not terminal
    disabled: bool = False  # its endpoint failed too long (.disabling); no runner runs
    failing_s: float | None = None  # how long its endpoint has failed every attempt
    disablings: int = 0  # the times this worker disabled it
    # Accepted -> 2xx; the worker hands each runner its subscription's (kept over restarts).
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)


COUNTERS = (
    "delivered",
    "filtered",
    "filter_errors",
    "attempts",
    "failed_attempts",
    "retried",
    "dead_lettered",
)
GAUGES = (  # of the runner running now; a stopped one shows the defaults
    "in_flight",
    "held",
    "blocked_groups",
    "segment",
    "circuit_state",
    "circuit_rate",
    "lag",
)


class Totals:
    """The counters of each subscription over its runners (one after the other: each
    restart starts a runner with fresh figures) and its latency, kept over restarts."""

    def __init__(self) -> None:
        self._totals: dict[str, RunnerStats] = {}
        self._latency: dict[str, LatencyHistogram] = {}

    def keys(self) -> set[str]:
        return set(self._totals)

    def latency_of(self, key: str) -> LatencyHistogram:
        """The histogram a new runner of ``key`` observes into."""
        return self._latency.setdefault(key, LatencyHistogram())

    def fold(self, key: str, finished: RunnerStats) -> None:
        """Add a finished runner's counters to the totals of ``key``."""
        total = self._totals.setdefault(key, RunnerStats())
        for name in COUNTERS:
            setattr(total, name, getattr(total, name) + getattr(finished, name))

    def combined(self, key: str, live: RunnerStats | None) -> RunnerStats:
        """The totals of ``key`` with the running runner's (``live``) figures."""
        total = RunnerStats()
        for part in (self._totals.get(key), live):
            if part is not None:
                for name in COUNTERS:
                    setattr(total, name, getattr(total, name) + getattr(part, name))
        if live is not None:
            for name in GAUGES:
                setattr(total, name, getattr(live, name))
        total.latency = self._latency.get(key) or LatencyHistogram()
        return total

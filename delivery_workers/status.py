"""Per-subscription figures a worker publishes for the control plane's status endpoint.

Every ``interval_s`` the :class:`StatusPublisher` samples the worker's counters
(:meth:`Worker.stats`) and, for each subscription the worker holds, writes the ephemeral node
``/status/{project}:{s}`` (so it vanishes with the worker's session)::

    {"worker": "w-1", "segment": 3, "in_flight": 12, "held": 0, "blocked_groups": 0, "delayed": 0,
     "totals": {"delivered": .., "failed": .., "filtered": .., "retried": .., "dead_lettered": ..,
                "sidelined": ..},
     "rates": {"delivered_per_s": .., "failed_per_s": .., "filtered_per_s": ..},
     "circuit": {"state": "closed", "rate_per_s": 100.0} | null,
     "lag": 40 | null, "oldest_unacked_ms": 1767225600000 | null,
     "failures": {"500": 12, "timeout": 3},
     "last_failure": {"at_ms": .., "status": 500, "error": "HTTP 500: ..", "answer": ".."} | null,
     "dlq": {"size": 961, "failed_heads": 6, "sidelined": 955, "read_to": 970,
             "live": true} | null,
     "history": [[t, delivered, failed, filtered, dead_lettered, lag | null], ...],
     "updated_at": "2026-01-01T00:00:00Z"}

``history`` holds 10-second buckets (``t`` = the bucket's start, epoch seconds) over the last
hour, only the non-empty ones (the control plane fills in the gaps); ``lag`` there is the last
one the runner measured in the bucket; its ``dead_lettered`` counts every message into the
DLQ, the totals' ``dead_lettered`` the failed heads alone and ``sidelined`` their followers.
``failures`` counts failed attempts by the endpoint's status (or why no answer came),
``last_failure`` is the newest one with the start of the answer; with ``dead_lettered`` per
bucket the overview finds the DLQs that grow. ``dlq`` is what the DLQ holds now
(:mod:`.dlq_count`: a baseline scan when the runner starts, then its tail of the DLQ;
``live`` false while no runner runs, the last count kept; null before a count). Rates are
over the last ``rate_window_s``. A node is written only when its figures changed, or every
``refresh_s`` (60 s) otherwise, so an idle worker with thousands of subscriptions costs the
metastore little: "changed" leaves out a new history bucket that only repeats the last lag
(it rides along with the next write), and the history is serialised only for a write.

Totals count since this worker took the subscription: a subscription that moves to another
worker starts from zero there (the audit trail keeps the exact history).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from core.errors import AlreadyExists, HttpbusError, NotFound, VersionConflict
from core.lifecycle import AsyncResource
from core.tasks import cancel
from metastore import paths
from metastore.protocol import MetaStore

from .stats import RunnerStats

log = logging.getLogger(__name__)

BUCKET_S = 10
HISTORY_S = 3_600
# An unchanged node is written again this often (its ``updated_at`` moves): the node is
# ephemeral, so its presence already says the worker lives; at 10 s, 2 000 idle
# subscriptions on a worker were 200 ZooKeeper writes a second (bench/idle_subs.py).
REFRESH_S = 60.0
Figures = dict[str, object]  # a status document but its history (_figures)
# The figures of a held unit no runner has counted in yet (one starting): only read, so one
# for all. A fresh one for each such unit each second was 4 % of a member's CPU while it
# took 10^4 locks (bench/scale.py).
_NO_FIGURES = RunnerStats()


def _counts(stats: RunnerStats) -> tuple[int, int, int, int]:
    """(delivered, failed, filtered, dead_lettered): failed counts failed attempts,
    dead_lettered every message into the DLQ (failed heads and sidelined followers), so the
    history shows the DLQ growing as it does."""
    into_dlq = stats.dead_lettered + stats.sidelined
    return stats.delivered, stats.failed_attempts, stats.filtered, into_dlq


@dataclass
class _Series:
    """One subscription's samples (for rates) and 10-second buckets (for history)."""

    samples: deque[tuple[float, tuple[int, int, int, int]]] = field(default_factory=deque)
    buckets: dict[int, list[int]] = field(default_factory=dict)
    lags: dict[int, int] = field(default_factory=dict)  # the last lag seen in a bucket
    last: tuple[int, int, int, int] = (0, 0, 0, 0)  # the worker's counters start at zero
    version: int | None = None  # of the node we wrote; None: not written (or lost)
    # Bumped when the history changes in a way worth a write: counts moved, or a lag other
    # than the last one. A new bucket repeating the last lag is carried by the next write.
    changes: int = 0
    last_lag: int | None = None
    written: tuple[Figures, int] | None = None  # (the figures but the history, ``changes``)
    written_at: float = 0.0
    signature: tuple[object, ...] | None = None  # of the figures last built (_signature)
    swept_to: int | None = None  # the horizon buckets were last dropped before

    def add(
        self,
        now: float,
        wall: float,
        counts: tuple[int, int, int, int],
        window: float,
        lag: int | None = None,
    ) -> None:
        start = int(wall) // BUCKET_S * BUCKET_S
        if counts != self.last:  # (most units are idle: one comparison)
            delta = [max(0, a - b) for a, b in zip(counts, self.last, strict=True)]
            if any(delta):
                bucket = self.buckets.setdefault(start, [0, 0, 0, 0])
                for i, d in enumerate(delta):
                    bucket[i] += d
                self.changes += 1
        if lag is not None:
            self.lags[start] = lag
            if lag != self.last_lag:
                self.changes += 1
            self.last_lag = lag
        self.last = counts
        self.samples.append((now, counts))
        while len(self.samples) > 2 and now - self.samples[1][0] >= window:
            self.samples.popleft()
        # Buckets start at multiples of BUCKET_S, so which are past the hour changes only
        # when the horizon passes one: swept then, not over ~360 lags every second.
        horizon = start - HISTORY_S + (BUCKET_S if int(wall) != start else 0)
        if horizon != self.swept_to:
            self.swept_to = horizon
            for t in [t for t in self.buckets if t < horizon]:
                del self.buckets[t]
            for t in [t for t in self.lags if t < horizon]:
                del self.lags[t]

    def history(self) -> list[list[int | None]]:
        """``[t, delivered, failed, filtered, dead_lettered, lag]`` of every non-empty bucket."""
        out: list[list[int | None]] = []
        for t in sorted(self.buckets.keys() | self.lags.keys()):
            counts = self.buckets.get(t, [0, 0, 0, 0])
            out.append([t, *counts, self.lags.get(t)])
        return out

    def rates(self) -> tuple[float, float, float]:
        if len(self.samples) < 2:
            return 0.0, 0.0, 0.0
        (t0, c0), (t1, c1) = self.samples[0], self.samples[-1]
        if c0 == c1:
            return 0.0, 0.0, 0.0
        dt = max(t1 - t0, 1e-6)
        d, f, fl = ((b - a) / dt for a, b in zip(c0[:3], c1[:3], strict=True))
        return d, f, fl


class StatusPublisher(AsyncResource):
    """Publishes ``stats()`` of the subscriptions in ``held()`` (see the module doc)."""

    def __init__(
        self,
        metastore: MetaStore,
        member_id: str,
        stats: Callable[[], dict[str, RunnerStats]],
        held: Callable[[], set[str]],
        *,
        interval_s: float = 1.0,
        refresh_s: float = REFRESH_S,
        rate_window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.metastore = metastore
        self.member_id = member_id
        self.stats = stats
        self.held = held
        self.interval_s = interval_s
        self.refresh_s = refresh_s
        self.rate_window_s = rate_window_s
        self._clock = clock
        self._wall = wall
        self._series: dict[str, _Series] = {}
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=f"status-{self.member_id}")

    async def aclose(self) -> None:
        await cancel(self._task)
        self._task = None
        for key in list(self._series):
            await self._drop(key)
        self._series.clear()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self.publish()
            except HttpbusError as exc:  # the metastore is away: figures wait for it
                log.warning("worker %s could not publish status: %s", self.member_id, exc)

    async def publish(self) -> None:
        """Sample now and write what changed (one round of the loop). The writes of a round
        go out together, so the store sends them as a few batch requests (a ZooKeeper
        ``multi`` each: metastore/turn_batch.py): a worker starting a thousand units wrote
        their status nodes one after another, a request each."""
        now, wall = self._clock(), self._wall()
        stats, held = self.stats(), self.held()
        for key in [k for k, v in self._series.items() if k not in held and v.version is not None]:
            await self._drop(key)
        writes = []
        for key in sorted(held):
            st = stats.get(key, _NO_FIGURES)
            series = self._series.setdefault(key, _Series())
            series.add(now, wall, _counts(st), self.rate_window_s, st.lag)
            rates, due = series.rates(), now - series.written_at >= self.refresh_s
            # What the figures are made of, compared before they are built (most units are
            # idle); then the figures as values, serialised only for a write.
            signature = _signature(st, rates, series.changes)
            if signature == series.signature and not due:
                continue
            series.signature = signature
            figures = (_figures(self.member_id, st, rates), series.changes)
            if figures == series.written and not due:
                continue
            history = json.dumps(series.history(), separators=(",", ":"))
            document = json.dumps(figures[0], separators=(",", ":"))
            body = f'{document[:-1]},"history":{history}}}'
            writes.append(self._publish(key, series, body, wall, figures, now))
        failed = [e for e in await asyncio.gather(*writes, return_exceptions=True) if e]
        if failed:
            raise failed[0]

    async def _publish(
        self,
        key: str,
        series: _Series,
        body: str,
        wall: float,
        figures: tuple[Figures, int],
        now: float,
    ) -> None:
        await self._write(key, series, body, wall)
        series.written, series.written_at = figures, now

    async def _write(self, key: str, series: _Series, body: str, wall: float) -> None:
        stamp = datetime.fromtimestamp(wall, UTC).isoformat().replace("+00:00", "Z")
        data = (body[:-1] + f',"updated_at":"{stamp}"}}').encode()
        path = paths.unit_status(key)
        if series.version is not None:
            with contextlib.suppress(VersionConflict, NotFound):
                series.version = (
                    await self.metastore.update(path, data, expected_version=series.version)
                ).version
                return
        try:
            series.version = (await self.metastore.create(path, data, ephemeral=True)).version
        except AlreadyExists:  # a previous owner's node, not expired yet: take it over
            node = await self.metastore.get(path)
            if node is not None:
                with contextlib.suppress(VersionConflict, NotFound):
                    updated = await self.metastore.update(path, data, expected_version=node.version)
                    series.version = updated.version

    async def _drop(self, key: str) -> None:
        """Delete the node of a subscription no longer held; its series stays (the worker's
        counters go on counting if it comes back, as after a seek)."""
        series = self._series.get(key)
        if series is None or series.version is None:
            return
        version, series.version, series.written = series.version, None, None
        path = paths.unit_status(key)
        # Only our own write: a newer owner's node has another version.
        with contextlib.suppress(HttpbusError):
            await self.metastore.delete(path, expected_version=version)


def _signature(
    st: RunnerStats, rates: tuple[float, float, float], changes: int
) -> tuple[object, ...]:
    """Everything :func:`_figures` reads, flat: equal signatures make equal figures, so an
    idle unit's figures are not built each second only to be found unchanged (~20 ms a
    round at 2 000 idle units before)."""
    dlq = st.dlq
    return (
        *rates,
        changes,
        st.segment,
        st.in_flight,
        st.held,
        st.blocked_groups,
        st.delayed,
        st.delivered,
        st.failed_attempts,
        st.filtered,
        st.retried,
        st.dead_lettered,
        st.sidelined,
        st.circuit_state,
        st.circuit_rate,
        st.lag,
        st.commit_failing_since_ms,
        st.oldest_unacked_ms,
        tuple(st.failures.items()),
        st.last_failure,
        dlq.known,
        dlq.live,
        dlq.read_to,
        dlq.failed_heads,
        dlq.sidelined,
    )


def _figures(member_id: str, st: RunnerStats, rates: tuple[float, float, float]) -> Figures:
    """The status document but its history, as a value: compared with the last one
    written, and encoded only when it differs (every nested part is a fresh copy, so a live
    runner's counters changing later cannot change it)."""
    d, f, fl = rates
    return {
        "worker": member_id,
        "segment": st.segment or None,
        "in_flight": st.in_flight,
        "held": st.held,
        "blocked_groups": st.blocked_groups,
        "delayed": st.delayed,
        "totals": {
            "delivered": st.delivered,
            "failed": st.failed_attempts,
            "filtered": st.filtered,
            "retried": st.retried,
            "dead_lettered": st.dead_lettered,
            "sidelined": st.sidelined,
        },
        "rates": {
            "delivered_per_s": round(d, 2),
            "failed_per_s": round(f, 2),
            "filtered_per_s": round(fl, 2),
        },
        "circuit": _circuit(st),
        "lag": st.lag,
        "commit_failing_since_ms": st.commit_failing_since_ms,
        "oldest_unacked_ms": st.oldest_unacked_ms,
        "failures": dict(sorted(st.failures.items())),
        "last_failure": st.last_failure,  # replaced, never changed in place (record_failure)
        "dlq": st.dlq.figures(),
    }


def _circuit(stats: RunnerStats) -> dict[str, object] | None:
    """The breaker's state and rate, or None when the subscription runs without one."""
    if stats.circuit_state is None:
        return None
    return {"state": stats.circuit_state, "rate_per_s": stats.circuit_rate}

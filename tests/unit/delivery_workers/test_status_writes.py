"""What an idle subscription's status costs the metastore (issue 35: one worker, 2 000 idle
subscriptions): a node is written when its figures change, or every ``refresh_s``; a new
history bucket that only repeats the last lag is no change, and rides along with the next
write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from delivery_workers import status as status_module
from delivery_workers.stats import RunnerStats
from delivery_workers.status import BUCKET_S, HISTORY_S, REFRESH_S, StatusPublisher, _Series
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from tests.support.clock import ManualClock


class _Counting(EmbeddedMetaStore):
    writes = 0

    async def create(self, path: str, data: bytes = b"", **kw: Any) -> Any:
        self.writes += 1
        return await super().create(path, data, **kw)

    async def update(self, path: str, data: bytes, **kw: Any) -> Any:
        self.writes += 1
        return await super().update(path, data, **kw)


async def test_idle_figures_are_written_once_a_refresh(tmp_path: Path) -> None:
    stats = RunnerStats(lag=0, segment=1)
    clock, wall = ManualClock(100.0), ManualClock(1_000_000.0)
    async with _Counting(str(tmp_path / "meta.db")) as meta:
        status = StatusPublisher(
            meta, "w-1", lambda: {"p/s": stats}, lambda: {"p/s"}, clock=clock, wall=wall
        )
        await status.publish()
        assert meta.writes == 1
        for _ in range(int(REFRESH_S) - 1):  # a round a second, a new 10 s bucket each 10
            clock.now += 1
            wall.now += 1
            await status.publish()
        assert meta.writes == 1  # the same lag in six buckets: nothing to write
        clock.now += 1
        wall.now += 1
        await status.publish()  # the refresh carries every bucket's lag
        assert meta.writes == 2
        node = await meta.get(paths.unit_status("p/s"))
        assert node is not None
        history = json.loads(node.data)["history"]
        assert len(history) == 7 and {row[5] for row in history} == {0}

        stats.lag = 40  # a new lag is written at once
        clock.now += 1
        wall.now += 1
        await status.publish()
        assert meta.writes == 3
        stats.delivered = 40  # so are moved counts
        clock.now += 1
        wall.now += 1
        await status.publish()
        assert meta.writes == 4
        node = await meta.get(paths.unit_status("p/s"))
        assert node is not None
        doc = json.loads(node.data)
        assert doc["lag"] == 40 and doc["totals"]["delivered"] == 40
        assert doc["history"][-1][1] == 40 and doc["history"][-1][5] == 40
        # The figures are compared as values before a document is made: a count added in
        # place to the live ``failures`` dict still differs from what was written.
        stats.failures["503"] = 1
        clock.now += 1
        await status.publish()
        assert meta.writes == 5
        node = await meta.get(paths.unit_status("p/s"))
        assert node is not None and json.loads(node.data)["failures"] == {"503": 1}
        await status.aclose()


def test_buckets_past_the_hour_are_dropped_as_a_sweep_every_second_would() -> None:
    """The sweep runs only when the horizon passes a bucket's start, not every second over
    every kept lag (~360 a unit after an hour); what it keeps is the same."""
    series = _Series()
    for second in range(2 * HISTORY_S + 25):
        wall = 1_000_003.0 + second
        series.add(float(second), wall, (second // 7, 0, 0, 0), 10.0, lag=second % 3)
        horizon = int(wall) - HISTORY_S
        assert min(series.lags) >= horizon and min(series.buckets, default=horizon) >= horizon
        if second > HISTORY_S:  # nothing younger than the hour dropped
            assert min(series.lags) - BUCKET_S < horizon


_CHANGES: list[tuple[str, Any]] = [
    ("segment", 2),
    ("in_flight", 3),
    ("held", 4),
    ("blocked_groups", 1),
    ("delayed", 7),
    ("failed_attempts", 1),
    ("filtered", 2),
    ("retried", 1),
    ("dead_lettered", 1),
    ("sidelined", 2),
    ("circuit_state", "open"),
    ("circuit_rate", 5.0),
    ("lag", 9),
    ("commit_failing_since_ms", 123),
    ("oldest_unacked_ms", 456),
    ("last_failure", {"at_ms": 1, "status": 500, "error": "HTTP 500", "answer": ""}),
]


async def test_an_idle_unit_builds_no_figures_and_every_change_is_written(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Figures are built only when what they are made of moved (status._signature), and
    a change of any part of them is still written at once."""
    built: list[int] = []
    real = status_module._figures
    monkeypatch.setattr(
        status_module,
        "_figures",
        lambda *a: built.append(1) or real(*a),  # type: ignore[func-returns-value]
    )
    stats = RunnerStats(lag=0, segment=1)
    clock, wall = ManualClock(100.0), ManualClock(1_000_000.0)
    async with _Counting(str(tmp_path / "meta.db")) as meta:
        status = StatusPublisher(
            meta, "w-1", lambda: {"p/s": stats}, lambda: {"p/s"}, clock=clock, wall=wall
        )
        for _ in range(30):
            clock.now += 1
            wall.now += 1
            await status.publish()
        assert (len(built), meta.writes) == (1, 1)
        for name, value in [*_CHANGES, ("dlq", None)]:
            if name == "dlq":
                stats.dlq.reset([(5, False)], read_to=6)
            else:
                setattr(stats, name, value)
            before = meta.writes
            clock.now += 1
            await status.publish()
            assert meta.writes == before + 1, f"a change of {name} was not written"
        await status.aclose()

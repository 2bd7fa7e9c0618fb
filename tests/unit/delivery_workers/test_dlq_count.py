"""The worker's count of what a DLQ holds (delivery_workers.dlq_count): a baseline, the
entries its tail reads, and the removals a purge or an unsideline appends."""

from __future__ import annotations

from delivery_workers.dlq_count import DlqCount
from delivery_workers.stats import Totals


def test_nothing_is_said_before_a_baseline() -> None:
    assert DlqCount().figures() is None


def test_a_baseline_then_entries_and_removals() -> None:
    count = DlqCount()
    count.reset([(0, False), (1, True), (2, True)], read_to=3)
    assert count.figures() == {
        "size": 3,
        "failed_heads": 1,
        "sidelined": 2,
        "read_to": 3,
        "live": True,
    }
    count.seen(3, sidelined=False)
    count.seen(4, sidelined=True)
    count.seen(4, sidelined=True)  # read twice (a tail restarted): counted once
    assert (count.size, count.failed_heads, count.sidelined) == (5, 2, 3)
    count.removed([1, 3, 99], at=5)  # a purge; 99 was never live here (another shard's)
    assert (count.size, count.failed_heads, count.sidelined, count.read_to) == (3, 1, 2, 6)


def test_a_new_baseline_replaces_the_old_count() -> None:
    count = DlqCount()
    count.reset([(0, False), (1, True)], read_to=2)
    count.reset([(5, True)], read_to=6)  # the next runner's scan
    assert (count.size, count.failed_heads, count.sidelined) == (1, 0, 1)


def test_the_last_count_stays_shown_while_no_runner_runs() -> None:
    totals = Totals()
    count = totals.dlq_of("shop/grouped")
    count.reset([(0, False), (1, True)], read_to=2)
    count.live = False  # the runner stopped (paused)
    shown = totals.combined("shop/grouped", None).dlq.figures()
    assert shown is not None and shown["size"] == 2 and shown["live"] is False
    assert totals.dlq_of("shop/grouped") is count  # the next runner counts into it

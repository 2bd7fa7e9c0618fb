"""The worker's count of what a DLQ holds (delivery_workers.dlq_count): a baseline, the
entries its tail reads, and the removals a purge or an unsideline appends."""

from __future__ import annotations

import json

from core.envelope import DLQ_KIND, GROUP_ID
from core.shards import WHOLE, Shard
from delivery_workers.dlq_count import DlqCount
from delivery_workers.stats import Totals
from segments.protocol import Stored
from segments.subscription import dlq
from segments.subscription.retry_meta import RetryMeta


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


def _entry(position: int, group: str, attempts: int) -> Stored:
    meta = RetryMeta(origin=f"1:0:{position}", topic="p/t", attempts=attempts)
    headers = (*meta.headers(), (GROUP_ID, group.encode()))
    return Stored(0, position, 0, b"x", None, headers)


def _removal(position: int, removed: list[int]) -> Stored:
    value = json.dumps(removed).encode()
    return Stored(0, position, 0, value, None, ((DLQ_KIND, dlq.REMOVED),))


def test_records_read_in_order_count_this_shards_entries_and_every_removal() -> None:
    shard = Shard(0, 2)
    mine = next(f"g{i}" for i in range(20) if shard.owns(f"g{i}", 0))
    other = next(f"g{i}" for i in range(20) if not shard.owns(f"g{i}", 0))
    count = DlqCount()
    count.reset((), 0)
    count.read(
        [
            _entry(0, mine, attempts=2),  # a failed head
            _entry(1, mine, attempts=0),  # sidelined behind it
            _entry(2, other, attempts=2),  # the other shard's
            _entry(3, mine, attempts=0),
            _removal(4, [1, 2]),
        ],
        shard,
    )
    assert (count.size, count.failed_heads, count.sidelined, count.read_to) == (2, 1, 1, 5)
    whole = DlqCount()
    whole.reset((), 0)
    whole.read([_entry(0, mine, 1), _entry(1, other, 0)], WHOLE)
    assert (whole.failed_heads, whole.sidelined) == (1, 1)

"""An idle subscription's lag sample asks the storage nothing (issue 35: one worker, 2 000
idle subscriptions): its source is read to the end and committed there."""

from __future__ import annotations

from collections.abc import Mapping

from delivery_workers.items import Source
from delivery_workers.tracking import CommitPolicy
from segments.protocol import Stored
from tests.support.clock import ManualClock


class _Backlog:
    """The store's backlog, counted; every partition 7 behind."""

    calls = 0

    async def backlog(
        self, name: str, group: str, committed: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        self.calls += 1
        return {0: 7, 1: 7}


def _source(clock: ManualClock) -> tuple[Source, _Backlog]:
    store = _Backlog()
    source = Source(store, "st.1", "g", {0: 5, 1: 9}, CommitPolicy())  # type: ignore[arg-type]
    source._clock = clock
    return source, store


async def test_caught_up_is_zero_without_a_storage_call() -> None:
    clock = ManualClock()
    source, store = _source(clock)
    assert await source.lag() == 14  # nothing read yet: the storage says
    source.read_at(0, 5, 0)
    assert await source.lag() == 14  # partition 1 not read to its end yet
    source.read_at(1, 9, 0)
    assert await source.lag() == 0
    assert store.calls == 2


async def test_an_old_empty_read_or_a_batch_asks_the_storage_again() -> None:
    clock = ManualClock()
    source, store = _source(clock)
    source.read_at(0, 5, 0)
    source.read_at(1, 9, 0)
    clock.now += 3.5  # the reads stopped (an open circuit, say): no longer a proof
    assert await source.lag() == 14
    source.read_at(0, 5, 0)
    source.read_at(1, 9, 3)  # messages came
    assert await source.lag() == 14
    assert store.calls == 2


async def test_read_to_the_end_but_not_committed_there_asks_the_storage() -> None:
    clock = ManualClock()
    source, store = _source(clock)
    msg = Stored(partition=0, position=5, timestamp_ms=0, value=b"", key=None, headers=())
    source.track(msg)  # read, not terminal: committed stays 5
    source.read_at(0, 6, 0)
    source.read_at(1, 9, 0)
    assert await source.lag() == 14
    assert store.calls == 1

"""The committed-position read's bound is the read's own (``segments.kafka.offsets``): a read
waiting for one of the ``THREADS`` threads behind others is not timed out for it. When it
was, a worker starting 2 000 subscriptions failed the reads queued last, restarted their
runners and queued them again: the start did not settle (bench/idle_subs.py). No broker
here: the group reader is replaced."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from core.errors import StorageUnavailable
from segments.kafka import offsets
from segments.kafka.config import KafkaSettings
from segments.kafka.store import KafkaSegmentStore

READ_S = 0.2  # what one read takes on its thread
BOUND_S = 0.5  # each read's own bound: 2 reads in a row, not the 4 rounds queued here


class _SlowReader:
    """A group reader whose every read takes ``READ_S`` on its thread."""

    def __init__(self, *_: Any) -> None:
        pass

    def committed(self, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        time.sleep(min(READ_S, timeout))
        if timeout < READ_S:
            raise StorageUnavailable("kafka: timed out", details={"retriable": False})
        return {0: 7}

    def close(self) -> None:
        pass


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Iterator[KafkaSegmentStore]:
    monkeypatch.setattr(offsets, "_GroupReader", _SlowReader)
    s = KafkaSegmentStore(KafkaSettings(bootstrap_servers="127.0.0.1:9", produce_timeout_s=BOUND_S))
    s._counts["t"] = 1  # no metadata lookup
    yield s
    s._groups._executor.shutdown(wait=True)


async def test_reads_queued_behind_others_are_not_timed_out_for_it(
    store: KafkaSegmentStore,
) -> None:
    n = 4 * offsets.THREADS  # 4 rounds of READ_S: past BOUND_S for the last ones
    started = time.monotonic()
    got = await asyncio.gather(*(store.committed("t", f"g{i}") for i in range(n)))
    assert got == [{0: 7}] * n
    assert time.monotonic() - started >= 3 * READ_S  # they did queue


async def test_a_read_is_still_bounded_once_a_thread_takes_it(
    store: KafkaSegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(offsets, "SLACK_S", 0.1)

    def stuck(self: _SlowReader, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        time.sleep(timeout + 0.5)  # a read that ignores its own bound
        return {0: 7}

    monkeypatch.setattr(_SlowReader, "committed", stuck)
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="no answer"):
        await store.committed("t", "g")
    assert time.monotonic() - started < BOUND_S + 0.4


async def test_the_wait_for_a_thread_is_bounded_apart(
    store: KafkaSegmentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Wide margins (CI, niced at load 7: 3 of the first reads found no thread in 0.05 s):
    # each read holds its thread 1.2 s (under its bound, 0.5 s + SLACK_S), the extra read
    # waits for one at least that long, past QUEUE_S; the others are taken within 0.6 s.
    monkeypatch.setattr(offsets, "QUEUE_S", 0.6)

    def held(self: _SlowReader, topic: str, partitions: int, timeout: float) -> dict[int, int]:
        time.sleep(1.2)
        return {0: 7}

    monkeypatch.setattr(_SlowReader, "committed", held)
    reads = [store.committed("t", f"g{i}") for i in range(offsets.THREADS + 1)]
    got = await asyncio.gather(*reads, return_exceptions=True)
    waited = [g for g in got if isinstance(g, StorageUnavailable)]
    assert len(waited) == 1 and "for a thread" in str(waited[0])

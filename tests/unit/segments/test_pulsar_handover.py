"""The Pulsar hot paths' pieces that need no broker: the hand-over of client callbacks to the
loop (nothing lost, order kept, few wake-ups), the message a record is built into, and the
client objects under ``pulsar.asyncio`` that the hot paths call directly."""

from __future__ import annotations

import asyncio
import threading

import pulsar.asyncio as pulsar_asyncio

from segments.protocol import Record
from segments.pulsar.handover import Handover
from segments.pulsar.producer import build, decode, native
from tests.support.until import until


async def test_calls_from_many_threads_all_run_on_the_loop_in_order_per_thread() -> None:
    loop = asyncio.get_running_loop()
    handover = Handover(loop)
    seen: dict[int, list[int]] = {t: [] for t in range(4)}
    loop_thread = threading.get_ident()
    on_loop: list[bool] = []

    def note(thread: int, index: int) -> None:
        on_loop.append(threading.get_ident() == loop_thread)
        seen[thread].append(index)

    def produce(thread: int) -> None:
        for index in range(5_000):
            handover.call(note, thread, index)

    threads = [threading.Thread(target=produce, args=(t,)) for t in seen]
    for t in threads:
        t.start()
    await until(lambda: sum(map(len, seen.values())) == 20_000, what="every call run")
    for t in threads:
        t.join()
    assert all(seen[t] == list(range(5_000)) for t in seen)
    assert all(on_loop)


async def test_a_burst_of_calls_wakes_the_loop_once() -> None:
    loop = asyncio.get_running_loop()
    handover = Handover(loop)
    wakeups = 0
    real = loop.call_soon_threadsafe

    def counting(*args: object, **kwargs: object) -> asyncio.Handle:
        nonlocal wakeups
        wakeups += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
    try:
        got: list[int] = []
        burst = threading.Thread(target=lambda: [handover.call(got.append, i) for i in range(500)])
        burst.start()
        burst.join()
        await until(lambda: len(got) == 500, what="the burst run")
    finally:
        del loop.call_soon_threadsafe
    assert got == list(range(500))
    assert wakeups == 1


async def test_a_failing_call_does_not_strand_the_ones_behind_it() -> None:
    handover = Handover(asyncio.get_running_loop())
    got: list[int] = []
    handover.call(lambda: 1 / 0)
    handover.call(got.append, 7)
    await until(lambda: got == [7], what="the call after the failing one")


class _Stored:
    """A built message as the reader would get it back: the same calls, and an id."""

    def __init__(self, built: object) -> None:
        self._built = built

    def message_id(self) -> object:
        class Id:
            def ledger_id(self) -> int:
                return 7

            def entry_id(self) -> int:
                return 3

            def batch_index(self) -> int:
                return 2

        return Id()

    def publish_timestamp(self) -> int:
        return 1

    def __getattr__(self, name: str) -> object:
        return getattr(self._built, name)


def test_a_record_is_built_into_the_message_the_reader_decodes() -> None:
    record = Record(
        value=b"\x00payload",
        key=b"\xffk",
        headers=(("x-a", b"1"), ("x-a", b"\x00\x01")),
        timestamp_ms=1_700_000_000_123,
    )
    stored = decode(_Stored(build(record, 1_700_000_000_123)), partition=2)
    assert stored.value == b"\x00payload" and stored.key == b"\xffk"
    assert stored.headers == record.headers and stored.timestamp_ms == 1_700_000_000_123
    assert stored.partition == 2 and stored.position == 7 << 32 | 3 << 12 | 2


def test_an_empty_key_is_told_apart_from_none() -> None:
    assert decode(_Stored(build(Record(value=b"v", key=b""), 5)), 0).key == b""
    assert decode(_Stored(build(Record(value=b"v"), 5)), 0).key is None


def test_the_asyncio_wrappers_expose_the_client_objects_the_hot_paths_call() -> None:
    inner = object()
    assert native(pulsar_asyncio.Producer(inner, None)) is inner  # type: ignore[arg-type]
    assert native(pulsar_asyncio.Reader(inner, None)) is inner  # type: ignore[arg-type]

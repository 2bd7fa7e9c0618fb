"""Reads that follow partitions share one consumer (segments/kafka/follow.py), on the real broker.

A process that follows many partitions' tails gets each new message at once, with one
consumer for all of them and no partition reader; reads elsewhere still answer right (by a
partition reader of their own); a follow paused on a full buffer loses and repeats nothing.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest

from segments.config import KafkaClusterConfig
from segments.kafka import KafkaSegmentStore, create_store
from segments.kafka.config import KafkaSettings
from segments.kafka.follow import Followers
from segments.protocol import Record, Stored
from tests.support.services import RealServices

pytestmark = pytest.mark.kafka

RETENTION_MS = 3_600_000


@pytest.fixture
async def store(real_services: RealServices) -> AsyncIterator[KafkaSegmentStore]:
    config = KafkaClusterConfig(bootstrap_servers=real_services.kafka, produce_timeout_s=5.0)
    async with create_store(config) as opened:
        yield opened


async def _topic(store: KafkaSegmentStore, partitions: int) -> str:
    name = f"httpbus.follow-test.t{uuid.uuid4().hex[:10]}.s1"
    await store.create_topic(name, partitions, retention_ms=RETENTION_MS)
    return name


async def _tail(
    store: KafkaSegmentStore, name: str, partition: int, got: dict[int, list[Stored]]
) -> None:
    """Reads the partition's tail as a worker's shared tail does: a read of at most 1 s at a
    time, each where the last one ended."""
    position = 0
    while True:
        batch = await store.read(name, partition, position, max_records=100, timeout=1.0)
        if batch:
            got.setdefault(partition, []).extend(batch)
            position = batch[-1].position + 1


async def test_two_hundred_followed_tails_share_one_consumer_and_get_news_at_once(
    store: KafkaSegmentStore,
) -> None:
    partitions = 200
    name = await _topic(store, partitions)
    got: dict[int, list[Stored]] = {}
    tails = [asyncio.create_task(_tail(store, name, p, got)) for p in range(partitions)]
    try:
        deadline = time.monotonic() + 60  # two reads elsewhere each first, 32 at a time
        while store.read_clients()["followed"] < partitions:
            assert time.monotonic() < deadline, store.read_clients()
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)  # every tail waits at the end now
        sent = time.monotonic()
        for p in range(partitions):
            await store.produce(name, Record(value=f"m{p}".encode()), partition=p)
        while len(got) < partitions:
            assert time.monotonic() < sent + 10, f"{len(got)} of {partitions} tails got news"
            await asyncio.sleep(0.05)
        took = time.monotonic() - sent
        assert {p: [m.value for m in got[p]] for p in got} == {
            p: [f"m{p}".encode()] for p in range(partitions)
        }
        # One consumer followed them all: no partition reader was opened for a tail.
        assert store.read_clients() == {"followed": partitions, "partition_readers": 0}, took
    finally:
        for task in tails:
            task.cancel()
        await asyncio.gather(*tails, return_exceptions=True)
        await store.delete_topic(name)


async def test_a_read_behind_the_follow_is_answered_by_a_reader_of_its_own(
    store: KafkaSegmentStore,
) -> None:
    name = await _topic(store, 1)
    try:
        for i in range(30):
            await store.produce(name, Record(value=b"%d" % i), partition=0)
        head = await store.read(name, 0, 0, max_records=10, timeout=5.0)
        assert [m.position for m in head] == list(range(10))
        assert store.read_clients() == {"followed": 0, "partition_readers": 1}
        # The second read in sequence: the partition is followed from 20 on, its reader closed.
        second = await store.read(name, 0, 10, max_records=10, timeout=5.0)
        assert [m.position for m in second] == list(range(10, 20))
        assert store.read_clients() == {"followed": 1, "partition_readers": 0}
        # A read from 3 is another reader's: answered alike, by a partition reader.
        behind = await store.read(name, 0, 3, max_records=5, timeout=5.0)
        assert [m.position for m in behind] == [3, 4, 5, 6, 7]
        assert store.read_clients() == {"followed": 1, "partition_readers": 1}
        rest = await store.read(name, 0, 20, max_records=100, timeout=5.0)
        assert [m.value for m in rest] == [b"%d" % i for i in range(20, 30)]
        assert store.read_clients() == {"followed": 1, "partition_readers": 1}
    finally:
        await store.delete_topic(name)


def test_a_one_off_read_starts_no_follow(real_services: RealServices) -> None:
    follows = Followers(KafkaSettings(bootstrap_servers=real_services.kafka))

    async def reads() -> tuple[list[bool], int]:
        # Reads elsewhere: 0..5, then a look at 100, then 5 again (not where the last ended).
        try:
            started = [
                follows.ended("t", 0, 0, [_at(p) for p in range(5)]),
                follows.ended("t", 0, 100, [_at(100)]),
                follows.ended("t", 0, 5, []),
                follows.ended("t", 0, 5, [_at(5)]),  # the second in sequence: followed from 6
            ]
            return started, follows.following()
        finally:
            await follows.close()

    assert asyncio.run(reads()) == ([False, False, False, True], 1)


def _at(position: int) -> Stored:
    return Stored(partition=0, position=position, timestamp_ms=0, value=b"")


async def test_a_follow_paused_on_a_full_buffer_loses_and_repeats_nothing(
    store: KafkaSegmentStore, real_services: RealServices
) -> None:
    name = await _topic(store, 1)
    follows = Followers(KafkaSettings(bootstrap_servers=real_services.kafka), buffer_bytes=4096)
    try:
        sent = 2_000
        outcomes = await store.produce_many(
            name, [Record(value=b"%04d" % i + b"x" * 200) for i in range(sent)]
        )
        assert not [o for o in outcomes if isinstance(o, Exception)]
        assert not follows.ended(name, 0, 0, [])  # two empty reads elsewhere: followed
        assert follows.ended(name, 0, 0, [])
        positions: list[int] = []
        deadline = time.monotonic() + 60
        while len(positions) < sent:
            assert time.monotonic() < deadline, f"{len(positions)} of {sent} read"
            start = positions[-1] + 1 if positions else 0
            batch = await follows.read(name, 0, start, 37, 1.0)
            assert batch is not None
            positions.extend(m.position for m in batch)
            await asyncio.sleep(0)  # a slow reader: the buffer fills and pauses the fetch
        assert positions == list(range(sent))
    finally:
        await follows.close()
        await store.delete_topic(name)

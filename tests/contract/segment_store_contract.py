"""The contract every ``SegmentStore`` backend meets, written once.

A backend's test module subclasses :class:`SegmentStoreContract` and provides two fixtures:
``store`` (a started store) and ``other_store`` (a second, independent client of the same
cluster: another process's view, which never saw this one's calls). Kafka and Pulsar run
it against the real servers, embedded against a SQLite file.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from core.errors import AlreadyExists, NotFound, SegmentFenced
from segments.protocol import Fence, Produced, Record, SegmentStore, partition_for

RETENTION_MS = 3_600_000


def _name() -> str:
    return f"httpbus.contract.t{uuid.uuid4().hex[:10]}.s1"


class SegmentStoreContract:
    async def test_is_a_segment_store(self, store: SegmentStore) -> None:
        assert isinstance(store, SegmentStore)

    async def test_create_describe_delete(self, store: SegmentStore) -> None:
        name = _name()
        assert await store.partitions(name) is None
        await store.create_topic(name, 3, retention_ms=RETENTION_MS)
        assert await store.partitions(name) == 3
        with pytest.raises(AlreadyExists):
            await store.create_topic(name, 3, retention_ms=RETENTION_MS)
        await store.delete_topic(name)
        assert await store.partitions(name) is None
        with pytest.raises(NotFound):
            await store.delete_topic(name)

    async def test_produce_to_a_missing_topic_is_not_found(self, store: SegmentStore) -> None:
        with pytest.raises(NotFound):
            await store.produce(_name(), Record(b"x"))

    async def test_round_trip_is_byte_identical(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 4, retention_ms=RETENTION_MS)
        payload = bytes(range(256)) * 4
        headers = (("x-trace", b"abc"), ("x-bin", b"\x00\xff\x10"), ("content-type", b"a/b"))
        got = await store.produce(name, Record(payload, key=b"group-7", headers=headers))
        assert got.partition == partition_for(b"group-7", 4)
        [back] = await store.read(name, got.partition, got.position, max_records=1, timeout=10)
        assert (back.value, back.key, back.headers) == (payload, b"group-7", headers)
        assert (back.partition, back.position) == (got.partition, got.position)
        assert abs(back.timestamp_ms - got.timestamp_ms) < 5_000

    async def test_explicit_partition_and_empty_payload(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        got = await store.produce(name, Record(b""), partition=1)
        [back] = await store.read(name, 1, got.position, timeout=10)
        assert (back.partition, back.value, back.key, back.headers) == (1, b"", None, ())

    async def test_one_key_is_read_in_produce_order(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 3, retention_ms=RETENTION_MS)
        produced = [
            await store.produce(name, Record(f"m{i}".encode(), key=b"k")) for i in range(30)
        ]
        assert len({p.partition for p in produced}) == 1
        positions = [p.position for p in produced]
        assert positions == sorted(positions) and len(set(positions)) == 30
        back = await _read_all(store, name, produced[0].partition, positions[0], 30)
        assert [m.value for m in back] == [f"m{i}".encode() for i in range(30)]
        assert [m.position for m in back] == positions

    async def test_produce_many_answers_per_record_in_order(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        records = [Record(f"b{i}".encode(), key=f"g{i % 3}".encode()) for i in range(60)]
        results = await store.produce_many(name, records)
        assert len(results) == 60 and all(isinstance(r, Produced) for r in results)
        by_key: dict[bytes, list[int]] = {}
        for rec, res in zip(records, results, strict=True):
            assert isinstance(res, Produced)
            assert res.partition == partition_for(rec.key, 2)
            by_key.setdefault(rec.key or b"", []).append(res.position)
        for positions in by_key.values():
            assert positions == sorted(positions)

    async def test_read_from_the_middle_and_from_the_end(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 1, retention_ms=RETENTION_MS)
        produced = [await store.produce(name, Record(f"{i}".encode())) for i in range(10)]
        back = await _read_all(store, name, 0, produced[4].position, 6)
        assert [m.value for m in back] == [f"{i}".encode() for i in range(4, 10)]
        end = (await store.end_positions(name))[0]
        assert end > produced[-1].position
        t0 = time.monotonic()
        assert await store.read(name, 0, end, timeout=0.5) == []
        assert time.monotonic() - t0 < 5

    async def test_last_positions_name_the_last_message(self, store: SegmentStore) -> None:
        """Produced one by one and in a batch (Pulsar packs a batch's messages in one entry;
        the last position is that entry's last message, below the end)."""
        name = _name()
        await store.create_topic(name, 3, retention_ms=RETENTION_MS)
        assert await store.last_positions(name) == {0: -1, 1: -1, 2: -1}
        key = next(f"k{i}".encode() for i in range(99) if partition_for(f"k{i}".encode(), 3) == 1)
        one = await store.produce(name, Record(b"one"), partition=0)
        results = await store.produce_many(name, [Record(b"%d" % i, key=key) for i in range(50)])
        assert all(isinstance(r, Produced) and r.partition == 1 for r in results)
        last = max(r.position for r in results if isinstance(r, Produced))
        assert await store.last_positions(name) == {0: one.position, 1: last, 2: -1}
        ends = await store.end_positions(name)
        assert one.position < ends[0] and last < ends[1]

    async def test_read_waits_for_a_message_produced_later(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 1, retention_ms=RETENTION_MS)
        end = (await store.end_positions(name))[0]

        async def later() -> None:
            await asyncio.sleep(0.3)
            await store.produce(name, Record(b"late"))

        task = asyncio.create_task(later())
        back = await store.read(name, 0, end, timeout=10)
        await task
        assert [m.value for m in back] == [b"late"]

    async def test_end_positions_of_an_empty_topic(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        ends = await store.end_positions(name)
        assert set(ends) == {0, 1}
        assert await store.read(name, 1, ends[1], timeout=0.2) == []

    async def test_seal_fences_every_later_write(
        self, store: SegmentStore, other_store: SegmentStore
    ) -> None:
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        # The other process writes before the seal, so it holds an open producer.
        before = await other_store.produce(name, Record(b"before", key=b"a"))
        assert not await store.is_sealed(name)
        ends = await store.seal(name)
        assert ends == await store.end_positions(name)
        assert ends[before.partition] > before.position
        assert await store.is_sealed(name)
        with pytest.raises(SegmentFenced):
            await store.produce(name, Record(b"after"))
        # The other process never saw the seal: the fence still refuses it, no ack.
        with pytest.raises(SegmentFenced):
            await other_store.produce(name, Record(b"stale", key=b"a"))
        failed = await other_store.produce_many(name, [Record(b"x"), Record(b"y")])
        assert all(isinstance(r, SegmentFenced) for r in failed)
        assert await store.seal(name) == ends  # idempotent
        assert await store.end_positions(name) == ends
        back = await store.read(name, before.partition, before.position, timeout=10)
        assert [m.value for m in back] == [b"before"]

    async def test_fence_refuses_at_once_and_the_seal_gives_the_final_ends(
        self, store: SegmentStore, other_store: SegmentStore
    ) -> None:
        """A cutover moves the produce pointer on the fence and records the final ends after
        the seal: the fence must refuse every writer at once, and its ends (final or not) may
        only grow to the seal's."""
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        before = await other_store.produce(name, Record(b"before", key=b"a"))
        fence = await store.fence(name)
        assert fence.ends[before.partition] > before.position
        with pytest.raises(SegmentFenced):
            await other_store.produce(name, Record(b"stale", key=b"a"))
        with pytest.raises(SegmentFenced):
            await store.produce(name, Record(b"after"))
        ends = await store.seal(name, settle_s=0.05)
        assert ends == fence.ends  # nobody was writing: the settle found nothing more
        assert await store.fence(name) == Fence(ends, final=True)  # sealed: final from now on

    async def test_position_at_a_timestamp(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 1, retention_ms=RETENTION_MS)
        now = int(time.time() * 1000)
        old = [
            await store.produce(name, Record(b"old", timestamp_ms=now - 60_000 + i))
            for i in range(3)
        ]
        new = [await store.produce(name, Record(b"new", timestamp_ms=now + i)) for i in range(3)]
        assert await store.position_at(name, 0, now - 120_000) == old[0].position
        assert await store.position_at(name, 0, now - 30_000) == new[0].position
        assert await store.position_at(name, 0, now + 1) == new[1].position
        end = (await store.end_positions(name))[0]
        assert await store.position_at(name, 0, now + 3_600_000) == end

    async def test_commit_and_committed(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        first = await store.produce(name, Record(b"1"), partition=0)
        second = await store.produce(name, Record(b"2"), partition=0)
        assert await store.committed(name, "sub-a") == {}
        await store.commit(name, "sub-a", {0: second.position})
        await store.commit(name, "sub-b", {0: first.position})
        assert await store.committed(name, "sub-a") == {0: second.position}
        assert await store.committed(name, "sub-b") == {0: first.position}
        end = (await store.end_positions(name))[0]
        await store.commit(name, "sub-a", {0: end})
        assert await store.committed(name, "sub-a") == {0: end}

    async def test_commit_moves_back_for_a_seek(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 1, retention_ms=RETENTION_MS)
        produced = [await store.produce(name, Record(b"m"), partition=0) for _ in range(3)]
        end = (await store.end_positions(name))[0]
        await store.commit(name, "sub-a", {0: end})
        await store.commit(name, "sub-a", {0: produced[1].position})
        assert await store.committed(name, "sub-a") == {0: produced[1].position}

    async def test_backlog_counts_messages_not_committed(self, store: SegmentStore) -> None:
        name = _name()
        await store.create_topic(name, 2, retention_ms=RETENTION_MS)
        produced = [await store.produce(name, Record(b"m"), partition=0) for _ in range(5)]
        assert await store.backlog(name, "sub-a") == {0: 5, 1: 0}
        await store.commit(name, "sub-a", {0: produced[2].position})
        assert await store.backlog(name, "sub-a") == {0: 3, 1: 0}
        # The sole committer may say what it committed: the same count, one call fewer.
        known = await store.committed(name, "sub-a")
        assert await store.backlog(name, "sub-a", known) == {0: 3, 1: 0}
        end = (await store.end_positions(name))[0]
        await store.commit(name, "sub-a", {0: end})
        assert await store.backlog(name, "sub-a") == {0: 0, 1: 0}


async def _read_all(store: SegmentStore, name: str, partition: int, start: int, n: int) -> list:  # type: ignore[type-arg]
    out = []
    deadline = time.monotonic() + 30
    while len(out) < n and time.monotonic() < deadline:
        batch = await store.read(name, partition, start, max_records=n - len(out), timeout=2)
        out += batch
        if batch:
            start = batch[-1].position + 1
    return out

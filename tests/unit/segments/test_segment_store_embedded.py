"""The embedded store meets the shared contract, plus what only a SQLite file can show:
durability across close and crash, group commit, the fence under concurrency, locks, retention.

``store`` and ``other_store`` are two independent stores on one file: two processes' views.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.errors import Malformed, NotFound, SegmentFenced, StorageUnavailable
from segments.config import EmbeddedClusterConfig
from segments.embedded import EmbeddedSegmentStore, EmbeddedSettings
from segments.embedded.schema import decode_headers, encode_headers
from segments.protocol import Produced, Record
from segments.registry import open_store
from tests.contract.segment_store_contract import SegmentStoreContract

HOUR_MS = 3_600_000


def _settings(path: Path, timeout: float = 5.0) -> EmbeddedSettings:
    return EmbeddedSettings(path=path, produce_timeout_s=timeout)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "segments.db"


@pytest.fixture
async def store(db_path: Path) -> AsyncIterator[EmbeddedSegmentStore]:
    async with EmbeddedSegmentStore(_settings(db_path)) as opened:
        yield opened


@pytest.fixture
async def other_store(
    db_path: Path, store: EmbeddedSegmentStore
) -> AsyncIterator[EmbeddedSegmentStore]:
    async with EmbeddedSegmentStore(_settings(db_path)) as opened:
        yield opened


class TestEmbeddedSegmentStoreContract(SegmentStoreContract):
    pass


async def test_registry_opens_a_wal_file_from_the_cluster_config(db_path: Path) -> None:
    store = open_store(EmbeddedClusterConfig(path=str(db_path / "sub" / "dev.db")))
    assert isinstance(store, EmbeddedSegmentStore)
    async with store:
        await store.create_topic("t", 1, retention_ms=HOUR_MS)
    conn = sqlite3.connect(db_path / "sub" / "dev.db")
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


async def test_acknowledged_messages_survive_close_and_reopen(db_path: Path) -> None:
    async with EmbeddedSegmentStore(_settings(db_path)) as first:
        await first.create_topic("t", 2, retention_ms=HOUR_MS)
        acked = await asyncio.gather(
            *(first.produce("t", Record(b"m%d" % i, key=b"k%d" % (i % 5))) for i in range(40))
        )
        await first.seal("t")
    async with EmbeddedSegmentStore(_settings(db_path)) as second:
        assert await second.is_sealed("t")
        back = [m for p in (0, 1) for m in await second.read("t", p, 0, timeout=0)]
    assert sorted((m.partition, m.position, m.value) for m in back) == sorted(
        (p.partition, p.position, b"m%d" % i) for i, p in enumerate(acked)
    )


CRASHING_PRODUCER = """
import asyncio, os, sys
from pathlib import Path
from segments.embedded import EmbeddedSegmentStore, EmbeddedSettings
from segments.protocol import Record

async def main():
    store = EmbeddedSegmentStore(EmbeddedSettings(path=Path(sys.argv[1])))
    await store.start()
    await store.create_topic("t", 1, retention_ms=0)
    acked = await asyncio.gather(*(store.produce("t", Record(b"%d" % i)) for i in range(50)))
    print(len(acked), flush=True)
    os._exit(0)  # killed right after the acknowledgements: no close, no checkpoint

asyncio.run(main())
"""


async def test_acknowledged_messages_survive_a_killed_process(db_path: Path) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CRASHING_PRODUCER, str(db_path), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await asyncio.wait_for(child.communicate(), 30)
    assert out.strip() == b"50"
    assert Path(f"{db_path}-wal").exists()  # the data is in the WAL, never checkpointed
    async with EmbeddedSegmentStore(_settings(db_path)) as store:
        back = await store.read("t", 0, 0, timeout=0)
    assert sorted(int(m.value) for m in back) == list(range(50))
    assert [m.position for m in back] == list(range(50))


async def test_concurrent_produces_share_transactions(store: EmbeddedSegmentStore) -> None:
    await store.create_topic("t", 3, retention_ms=HOUR_MS)
    before = store.write_transactions
    acked = await asyncio.gather(*(store.produce("t", Record(b"x")) for _ in range(300)))
    assert store.write_transactions - before < 100  # group commit, not one fsync each
    for partition in range(3):
        mine = sorted(p.position for p in acked if p.partition == partition)
        assert mine == list(range(100))  # round-robin, dense from 0, no duplicates
    assert await store.end_positions("t") == {0: 100, 1: 100, 2: 100}


async def test_produce_many_is_one_transaction(store: EmbeddedSegmentStore) -> None:
    await store.create_topic("t", 2, retention_ms=HOUR_MS)
    before = store.write_transactions
    results = await store.produce_many("t", [Record(b"%d" % i, key=b"k") for i in range(100)])
    assert store.write_transactions == before + 1
    assert [r.position for r in results if isinstance(r, Produced)] == list(range(100))


async def test_a_malformed_record_fails_alone(store: EmbeddedSegmentStore) -> None:
    await store.create_topic("t", 1, retention_ms=HOUR_MS)
    bad = Record(b"bad", headers=(("x-n", "not bytes"),))  # type: ignore[arg-type]
    results = await store.produce_many("t", [Record(b"a"), bad, Record(b"b")])
    assert [type(r) for r in results] == [Produced, Malformed, Produced]
    assert [m.value for m in await store.read("t", 0, 0, timeout=0)] == [b"a", b"b"]


async def test_seal_racing_producers_acks_exactly_what_it_keeps(
    store: EmbeddedSegmentStore, other_store: EmbeddedSegmentStore
) -> None:
    await store.create_topic("t", 1, retention_ms=HOUR_MS)

    async def produce(i: int) -> Produced | Exception:
        writer = store if i % 2 else other_store
        await asyncio.sleep(i * 0.001)
        try:
            return await writer.produce("t", Record(b"%d" % i))
        except SegmentFenced as exc:
            return exc

    tasks = [asyncio.create_task(produce(i)) for i in range(200)]
    await asyncio.sleep(0.05)
    ends = await store.seal("t")
    results = await asyncio.gather(*tasks)
    acked = [r for r in results if isinstance(r, Produced)]
    assert acked and len(acked) < 200  # the race happened on both sides of the seal
    assert all(isinstance(r, SegmentFenced) for r in results if not isinstance(r, Produced))
    stored = await store.read("t", 0, 0, max_records=1000, timeout=0)
    assert sorted(m.position for m in stored) == sorted(p.position for p in acked)
    assert ends == {0: len(acked)}


async def test_a_read_sees_another_process_write_promptly(
    store: EmbeddedSegmentStore, other_store: EmbeddedSegmentStore
) -> None:
    await store.create_topic("t", 1, retention_ms=HOUR_MS)

    async def later() -> None:
        await asyncio.sleep(0.2)
        await other_store.produce("t", Record(b"from afar"))

    task = asyncio.create_task(later())
    t0 = time.monotonic()
    back = await store.read("t", 0, 0, timeout=10)
    await task
    assert [m.value for m in back] == [b"from afar"]
    assert time.monotonic() - t0 < 1.0  # the poll, not the 10 s timeout


async def test_a_locked_database_is_storage_unavailable_then_recovers(db_path: Path) -> None:
    async with EmbeddedSegmentStore(_settings(db_path, timeout=0.3)) as store:
        await store.create_topic("t", 1, retention_ms=HOUR_MS)
        locker = sqlite3.connect(db_path, isolation_level=None)
        try:
            locker.execute("BEGIN IMMEDIATE")
            t0 = time.monotonic()
            with pytest.raises(StorageUnavailable):
                await store.produce("t", Record(b"blocked"))
            assert time.monotonic() - t0 < 2
        finally:
            locker.rollback()
            locker.close()
        # The refused record was not stored: the next one takes position 0.
        assert (await store.produce("t", Record(b"ok"))).position == 0


async def test_an_unopenable_file_is_storage_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StorageUnavailable):
        await EmbeddedSegmentStore(_settings(tmp_path)).start()  # a folder, not a file


async def test_a_closed_store_refuses_work(store: EmbeddedSegmentStore) -> None:
    await store.create_topic("t", 1, retention_ms=HOUR_MS)
    await store.aclose()
    with pytest.raises(StorageUnavailable):
        await store.produce("t", Record(b"late"))
    with pytest.raises(StorageUnavailable):
        await store.read("t", 0, 0, timeout=0)


async def test_retention_deletes_a_prefix_and_never_reuses_positions(db_path: Path) -> None:
    now = 1_700_000_000.0
    async with EmbeddedSegmentStore(_settings(db_path), clock=lambda: now) as store:
        await store.create_topic("t", 1, retention_ms=60_000)
        await store.create_topic("forever", 1, retention_ms=0)
        old_ms = int(now * 1000) - 120_000
        for name in ("t", "forever"):
            await store.produce_many(name, [Record(b"old", timestamp_ms=old_ms)] * 3)
            await store.produce(name, Record(b"new"))
        assert await store.enforce_retention() == 3
        assert [(m.position, m.value) for m in await store.read("t", 0, 0, timeout=0)] == [
            (3, b"new")
        ]
        assert len(await store.read("forever", 0, 0, timeout=0)) == 4
        assert (await store.produce("t", Record(b"next"))).position == 4
        assert await store.position_at("t", 0, 0) == 3


async def test_position_at_with_timestamps_out_of_order(store: EmbeddedSegmentStore) -> None:
    await store.create_topic("t", 1, retention_ms=0)
    await store.produce_many("t", [Record(b"", timestamp_ms=ts) for ts in (100, 50, 200, 150)])
    assert [await store.position_at("t", 0, ts) for ts in (0, 60, 101, 160, 201)] == [0, 0, 2, 2, 4]


async def test_missing_topics_and_partitions_are_not_found(store: EmbeddedSegmentStore) -> None:
    await store.create_topic("t", 2, retention_ms=HOUR_MS)
    with pytest.raises(NotFound):
        await store.produce("t", Record(b"x"), partition=2)
    with pytest.raises(NotFound):
        await store.read("t", 5, 0, timeout=0)
    for call in (store.end_positions("nope"), store.seal("nope"), store.commit("nope", "g", {})):
        with pytest.raises(NotFound):
            await call


def test_headers_are_stored_reversibly() -> None:
    headers = (("x-é", b""), ("", b"\x00\xff"), ("content-type", b"text/plain"))
    assert decode_headers(encode_headers(headers)) == headers
    assert encode_headers(()) is None and decode_headers(None) == ()

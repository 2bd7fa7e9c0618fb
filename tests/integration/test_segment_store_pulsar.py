"""The Pulsar backend against the real standalone: the shared contract, plus what only
Pulsar does (positions packed from message ids, topic-level retention, termination as the
fence, commits as subscription cursors, failures as ``StorageUnavailable``)."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator

import pytest

from core.errors import NotFound, SegmentFenced, StorageUnavailable
from segments.config import PulsarClusterConfig
from segments.protocol import Produced, Record
from segments.pulsar import PulsarSegmentStore, create_store
from segments.pulsar.errors import PositionOverflow
from segments.pulsar.producer import pack, unpack
from segments.registry import open_store
from tests.contract.segment_store_contract import RETENTION_MS, SegmentStoreContract
from tests.support.services import RealServices

pytestmark = pytest.mark.pulsar


def _config(real_services: RealServices, **overrides: object) -> PulsarClusterConfig:
    values: dict[str, object] = {
        "service_url": real_services.pulsar,
        "admin_url": real_services.pulsar_admin,
        "tenant": "public",
        "namespace": "default",
        "produce_timeout_s": 10.0,
    }
    values.update(overrides)
    return PulsarClusterConfig.model_validate(values)


def _name() -> str:
    return f"httpbus.pulsar.t{uuid.uuid4().hex[:10]}.s1"


def _admin_get(real_services: RealServices, path: str) -> object:
    url = f"{real_services.pulsar_admin}/admin/v2/persistent/public/default/{path}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture
async def store(real_services: RealServices) -> AsyncIterator[PulsarSegmentStore]:
    async with PulsarSegmentStore(_config(real_services)) as s:
        yield s


@pytest.fixture
async def other_store(real_services: RealServices) -> AsyncIterator[PulsarSegmentStore]:
    async with PulsarSegmentStore(_config(real_services)) as s:
        yield s


class TestPulsarSegmentStore(SegmentStoreContract):
    """The shared contract, on two independent clients of the real standalone."""


def test_the_registry_opens_a_pulsar_store(real_services: RealServices) -> None:
    config = _config(real_services)
    assert isinstance(open_store(config), PulsarSegmentStore)
    assert isinstance(create_store(config), PulsarSegmentStore)


def test_positions_pack_in_message_id_order() -> None:
    ids = [(3, 0, -1), (3, 0, 1), (3, 0, 999), (3, 1, 0), (3, 49_999, 0), (4, 0, 0)]
    packed = [pack(*i) for i in ids]
    assert packed == sorted(packed) and len(set(packed)) == len(ids)
    assert unpack(pack(2**31 - 1, 2**20 - 1, 4095)) == (2**31 - 1, 2**20 - 1, 4095)
    assert pack(2**31 - 1, 2**20 - 1, 4095) < 2**63
    for bad in [(2**31, 0, 0), (1, 2**20, 0), (1, 0, 4096)]:
        with pytest.raises(PositionOverflow, match="does not fit a position"):
            pack(*bad)


async def test_storage_topic_is_partitioned_with_topic_retention(
    store: PulsarSegmentStore, real_services: RealServices
) -> None:
    name = _name()
    await store.create_topic(name, 3, retention_ms=90 * 60_000 + 1)
    assert _admin_get(real_services, f"{name}/partitions") == {"partitions": 3, "deleted": False}
    retention = _admin_get(real_services, f"{name}/retention")
    assert retention == {"retentionTimeInMinutes": 91, "retentionSizeInMB": -1}
    await store.delete_topic(name)


async def test_batched_messages_have_distinct_positions_and_read_back_exactly(
    store: PulsarSegmentStore,
) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    records = [
        Record(f"v{i}".encode(), key=bytes([i, 255]), timestamp_ms=1_000 + i) for i in range(50)
    ]
    results = await store.produce_many(name, records)
    assert all(isinstance(r, Produced) for r in results)
    positions = [r.position for r in results if isinstance(r, Produced)]
    assert positions == sorted(positions) and len(set(positions)) == 50
    # With batching on, one entry holds many messages: the batch index tells them apart.
    assert len({unpack(p)[:2] for p in positions}) < 50
    back = await store.read(name, 0, positions[20], max_records=10, timeout=10)
    assert [m.value for m in back] == [f"v{i}".encode() for i in range(20, 30)]
    assert [(m.key, m.timestamp_ms) for m in back] == [
        (bytes([i, 255]), 1_000 + i) for i in range(20, 30)
    ]
    # The next calls continue where the last one stopped (the cached reader).
    more: list[int] = []
    while len(more) < 20:
        start = (more[-1] if more else back[-1].position) + 1
        batch = await store.read(name, 0, start, max_records=100, timeout=10)
        assert batch
        more += [m.position for m in batch]
    assert more == positions[30:]


async def test_empty_key_and_no_key_stay_apart(store: PulsarSegmentStore) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    a = await store.produce(name, Record(b"a", key=b""))
    b = await store.produce(name, Record(b"b"))
    back = await store.read(name, 0, a.position, max_records=2, timeout=10)
    assert [(m.value, m.key) for m in back] == [(b"a", b""), (b"b", None)]
    assert back[1].position == b.position


async def test_commit_inside_and_at_the_end_of_a_batch(store: PulsarSegmentStore) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    results = await store.produce_many(name, [Record(f"{i}".encode()) for i in range(20)])
    produced = [r for r in results if isinstance(r, Produced)]
    assert len(produced) == 20
    by_entry: dict[tuple[int, int], list[int]] = {}
    for r in produced:
        by_entry.setdefault(unpack(r.position)[:2], []).append(r.position)
    batch = max(by_entry.values(), key=len)
    assert len(batch) > 1, "expected batching to put several messages in one entry"
    # Past the batch's last message: the cursor moves to the next entry (Pulsar cursors
    # hold whole entries), which is also what end_positions says after the last entry.
    ledger, entry, _ = unpack(batch[-1])
    await store.commit(name, "g", {0: batch[-1] + 1})
    assert await store.committed(name, "g") == {0: pack(ledger, entry + 1, 0)}
    await store.commit(name, "g", await store.end_positions(name))
    assert await store.committed(name, "g") == await store.end_positions(name)
    # Inside the batch: rounded down to the batch's start (delivered again, never lost).
    await store.commit(name, "g", {0: batch[1]})
    assert await store.committed(name, "g") == {0: batch[0]}
    await store.commit(name, "g", {0: 0})
    assert await store.committed(name, "g") == {0: 0}


async def test_commits_are_durable_in_pulsar_and_seen_by_another_client(
    store: PulsarSegmentStore, other_store: PulsarSegmentStore, real_services: RealServices
) -> None:
    name = _name()
    await store.create_topic(name, 2, retention_ms=RETENTION_MS)
    got = await store.produce(name, Record(b"m"), partition=1)
    await store.commit(name, "workers", {1: got.position + 1})
    # Past the (one-message) batch: the next entry, the same as the partition's end.
    ledger, entry, _ = unpack(got.position)
    assert await other_store.committed(name, "workers") == {1: pack(ledger, entry + 1, 0)}
    assert (await other_store.end_positions(name))[1] == pack(ledger, entry + 1, 0)
    # The commit is a durable subscription cursor of the partition topic.
    stats = _admin_get(real_services, f"{name}-partition-1/internalStats")
    assert isinstance(stats, dict) and "workers" in stats["cursors"]
    assert stats["cursors"]["workers"]["markDeletePosition"] == f"{ledger}:{entry}"


async def test_a_timed_out_read_loses_nothing(store: PulsarSegmentStore) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    end = (await store.end_positions(name))[0]
    assert await store.read(name, 0, end, timeout=0.2) == []
    await store.produce(name, Record(b"after the timeout"))
    back = await store.read(name, 0, end, timeout=10)
    assert [m.value for m in back] == [b"after the timeout"]


async def test_read_past_the_end_of_a_sealed_topic_is_empty(store: PulsarSegmentStore) -> None:
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    first = await store.produce(name, Record(b"only"))
    ends = await store.seal(name)
    assert [m.value for m in await store.read(name, 0, first.position, timeout=10)] == [b"only"]
    t0 = time.monotonic()
    assert await store.read(name, 0, ends[0], timeout=0.5) == []
    assert time.monotonic() - t0 < 5
    with pytest.raises(SegmentFenced):
        await store.produce(name, Record(b"late"), partition=0)


async def test_missing_topic_is_not_found_everywhere(store: PulsarSegmentStore) -> None:
    name = _name()
    with pytest.raises(NotFound):
        await store.end_positions(name)
    with pytest.raises(NotFound):
        await store.seal(name)
    with pytest.raises(NotFound):
        await store.commit(name, "g", {0: 0})
    [failed] = await store.produce_many(name, [Record(b"x")])
    assert isinstance(failed, NotFound)


async def test_pulsar_down_is_storage_unavailable_in_time(real_services: RealServices) -> None:
    config = _config(
        real_services,
        service_url="pulsar://127.0.0.1:1",
        admin_url="http://127.0.0.1:1",
        produce_timeout_s=2.0,
    )
    async with PulsarSegmentStore(config) as down:
        t0 = time.monotonic()
        with pytest.raises(StorageUnavailable):
            await down.produce(_name(), Record(b"x"))
        with pytest.raises(StorageUnavailable):
            await down.create_topic(_name(), 1, retention_ms=RETENTION_MS)
        assert time.monotonic() - t0 < 5


async def test_broker_unreachable_is_storage_unavailable_in_time(
    store: PulsarSegmentStore, real_services: RealServices
) -> None:
    # The admin API answers (the topic exists) but the binary protocol port is closed:
    # the produce must still fail within produce_timeout_s, not hang.
    name = _name()
    await store.create_topic(name, 1, retention_ms=RETENTION_MS)
    config = _config(real_services, service_url="pulsar://127.0.0.1:1", produce_timeout_s=2.0)
    async with PulsarSegmentStore(config) as half:
        t0 = time.monotonic()
        with pytest.raises(StorageUnavailable):
            await half.produce(name, Record(b"x"))
        [failed] = await half.produce_many(name, [Record(b"y")])
        assert isinstance(failed, StorageUnavailable)
        assert time.monotonic() - t0 < 2 * 2.0 + 2
    assert await store.end_positions(name) == {0: 0}

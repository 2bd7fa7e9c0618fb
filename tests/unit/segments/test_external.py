"""An external (adopted, read-only) segment store over the embedded store: reads get an
httpbus envelope, writes are refused, seal is logical, delete leaves the topic."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core import envelope
from core.errors import NotFound, ValidationFailed
from segments.config import EmbeddedClusterConfig, KafkaClusterConfig
from segments.external import ExternalStore, external_id
from segments.protocol import Record, SegmentStore
from segments.registry import open_store
from segments.subscription import dlq

NAME = "legacy.orders"


@pytest.fixture
async def legacy(tmp_path: Path) -> AsyncIterator[SegmentStore]:
    config = EmbeddedClusterConfig(path=str(tmp_path / "segments.db"))
    async with open_store(config) as store:
        await store.create_topic(NAME, 1, retention_ms=3_600_000)
        yield store


async def test_reads_carry_an_httpbus_envelope(legacy: SegmentStore) -> None:
    await legacy.produce(NAME, Record(b"a", key=b"k1", headers=(("event-id", b"e1"),)))
    await legacy.produce(NAME, Record(b"b", headers=((envelope.MESSAGE_ID, b"m2"),)))
    await legacy.produce(NAME, Record(b"c", timestamp_ms=1_234))
    external = ExternalStore(legacy, id_header="Event-Id")
    first, second, third = await external.read(NAME, 0, 0, timeout=0.1)
    env = [envelope.Envelope.of(m.headers) for m in (first, second, third)]
    assert [e.message_id for e in env] == ["e1", "m2", external_id(NAME, 0, third.position)]
    assert env[0].group == "k1" and env[1].group is None
    assert env[2].produced_at_ms == 1_234
    assert first.headers[0] == ("event-id", b"e1")  # its own headers first, unchanged
    assert [m.value for m in (first, second, third)] == [b"a", b"b", b"c"]


async def test_never_written_sealed_only_logically_never_deleted(legacy: SegmentStore) -> None:
    await legacy.produce(NAME, Record(b"a"))
    external = ExternalStore(legacy)
    with pytest.raises(ValidationFailed, match="external topic"):
        await external.produce(NAME, Record(b"x"))
    assert all(
        isinstance(r, ValidationFailed) for r in await external.produce_many(NAME, [Record(b"x")])
    )
    # The protocol's optional ``committed`` shortcut is taken and the inner store asked.
    assert await external.backlog(NAME, "g", {0: 0}) == await legacy.backlog(NAME, "g")
    ends = await external.seal(NAME)
    assert (await external.fence(NAME)).ends == ends and not await external.is_sealed(NAME)
    await legacy.produce(NAME, Record(b"later"))  # its own producers go on writing
    await external.delete_topic(NAME)
    assert await legacy.partitions(NAME) == 1
    await external.create_topic(NAME, 1, retention_ms=1)  # adopts what exists
    with pytest.raises(ValidationFailed, match="partitions"):
        await external.create_topic(NAME, 3, retention_ms=1)
    with pytest.raises(NotFound):
        await external.create_topic("no.such.topic", 1, retention_ms=1)


def test_a_read_only_kafka_cluster_opens_wrapped() -> None:
    store = open_store(KafkaClusterConfig(read_only=True, id_header="event-id"))
    assert isinstance(store, ExternalStore) and store.id_header == "event-id"
    assert not isinstance(open_store(KafkaClusterConfig()), ExternalStore)


class TransactionMarker:
    """The legacy store, but its last offset is a transaction's commit marker: counted in
    the end, never returned by a read."""

    def __init__(self, inner: SegmentStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def end_positions(self, name: str) -> dict[int, int]:
        return {p: end + 1 for p, end in (await self.inner.end_positions(name)).items()}

    async def last_positions(self, name: str) -> dict[int, int]:
        return {p: last + 1 for p, last in (await self.inner.last_positions(name)).items()}


async def test_the_last_position_is_the_last_record_a_read_gives(legacy: SegmentStore) -> None:
    for i in range(3):
        await legacy.produce(NAME, Record(b"%d" % i))
    external = ExternalStore(TransactionMarker(legacy))
    assert await external.last_positions(NAME) == {0: 2}  # not 3, the marker
    t0 = time.monotonic()
    back = await dlq.read_all(external, NAME)  # not waiting for the marker to be read
    assert [m.value for m in back] == [b"0", b"1", b"2"]
    assert time.monotonic() - t0 < 5

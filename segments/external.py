"""An existing Kafka cluster adopted read-only: its topics become *external* first segments.

A team that already has a Kafka topic (its producers and consumers on the Kafka client) can
make it the first segment of an httpbus topic: subscriptions deliver from it like from any
segment, and a cutover later moves the topic onto an httpbus segment. httpbus never writes to
such a topic, never fences or deletes it. The cluster is declared in the configuration with
``read_only: true`` (``KafkaClusterConfig``) and :func:`segments.registry.open_store` wraps its
store in :class:`ExternalStore`:

- **reads** go to the Kafka store and every record is given an httpbus envelope on the way
  out, as the producer service would have written it, so delivery, retries, DLQ, audit and
  trace read it unchanged: ``x-message-id`` from the configured ``id_header`` (or, when the
  record has none, the deterministic ``<topic>:<partition>:<offset>``, the same on every read
  and in the Spark export), ``x-produced-at`` from the record's timestamp, ``x-group-id`` from
  its key. Headers the record already has are kept, first.
- **writes** are refused (``ValidationFailed``: the legacy producers write the topic);
  ``create_topic`` adopts an existing topic (``NotFound`` if there is none, and its partition
  count must be the one asked for) and ``delete_topic`` leaves it alone.
- **seal** is logical: it records the ends as they are (``fence`` returns them as final) and
  fences nothing, so legacy producers may go on writing; readers stop at the recorded ends.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from core import envelope
from core.errors import NotFound, ValidationFailed
from core.lifecycle import AsyncResource

from .protocol import Fence, Produced, Record, SegmentStore, Stored

LAST_PROBE = 64
"""How many offsets before an adopted partition's end are read to find its last record."""


def external_id(name: str, partition: int, position: int) -> str:
    """The id of a record stored without one: its address, the same on every read."""
    return f"{name}:{partition}:{position}"


class ExternalStore(AsyncResource):
    """A read-only view of ``inner`` (a started-with-it Kafka store); see the module doc."""

    def __init__(self, inner: SegmentStore, *, id_header: str | None = None) -> None:
        self.inner = inner
        self.id_header = (id_header or envelope.MESSAGE_ID).lower()

    async def start(self) -> None:
        await self.inner.start()

    async def aclose(self) -> None:
        await self.inner.aclose()

    # -- the envelope -----------------------------------------------------------------

    def enveloped(self, name: str, msg: Stored) -> Stored:
        """``msg`` with the httpbus headers a delivery reads (see the module doc)."""
        present = {k for k, _ in msg.headers}
        extra: list[tuple[str, bytes]] = []
        if envelope.MESSAGE_ID not in present:
            found = envelope.header(msg.headers, self.id_header)
            mid = found or external_id(name, msg.partition, msg.position)
            extra.append((envelope.MESSAGE_ID, envelope.encode(mid)))
        if envelope.PRODUCED_AT not in present:
            extra.append((envelope.PRODUCED_AT, str(msg.timestamp_ms).encode()))
        if envelope.GROUP_ID not in present and msg.key:
            extra.append((envelope.GROUP_ID, msg.key))
        if not extra:
            return msg
        return replace(msg, headers=(*msg.headers, *extra))

    async def read(
        self, name: str, partition: int, start: int, *, max_records: int = 500, timeout: float = 1.0
    ) -> list[Stored]:
        batch = await self.inner.read(
            name, partition, start, max_records=max_records, timeout=timeout
        )
        return [self.enveloped(name, m) for m in batch]

    # -- never written ----------------------------------------------------------------

    def _refuse(self, name: str) -> ValidationFailed:
        return ValidationFailed(
            f"{name} is an external topic (a read_only cluster): its own producers write it, "
            "httpbus never does; move the topic to an httpbus segment with a cutover first"
        )

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        raise self._refuse(name)

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        return [self._refuse(name) for _ in records]

    async def create_topic(self, name: str, partitions: int, *, retention_ms: int) -> None:
        found = await self.inner.partitions(name)
        if found is None:
            raise NotFound(f"external topic {name!r} does not exist on its cluster")
        if found != partitions:
            raise ValidationFailed(
                f"partitions: external topic {name!r} has {found} partitions, not {partitions}",
                details={"fields": [{"field": "partitions", "problem": f"it has {found}"}]},
            )

    async def delete_topic(self, name: str) -> None:
        """Never deleted: the topic belongs to its legacy producers and consumers."""

    async def seal(self, name: str, *, settle_s: float | None = None) -> dict[int, int]:
        return await self.inner.end_positions(name)

    async def fence(self, name: str) -> Fence:
        return Fence(ends=await self.inner.end_positions(name), final=True)

    async def is_sealed(self, name: str) -> bool:
        return False

    # -- delegated --------------------------------------------------------------------

    async def partitions(self, name: str) -> int | None:
        return await self.inner.partitions(name)

    async def end_positions(self, name: str) -> dict[int, int]:
        return await self.inner.end_positions(name)

    async def last_positions(self, name: str) -> dict[int, int]:
        """The last record a read gives, not the offset before the end: the legacy writers
        may be transactional, and a transaction's marker (or an aborted record) is an offset
        no read returns. Looked for among the last ``LAST_PROBE`` offsets; none there: -1 (a
        scan then takes an empty read for the end, as before ``last_positions``)."""
        lasts = await self.inner.last_positions(name)
        return {p: await self._readable_last(name, p, last) for p, last in lasts.items()}

    async def _readable_last(self, name: str, partition: int, last: int) -> int:
        if last < 0:
            return -1
        start = max(0, last + 1 - LAST_PROBE)
        batch = await self.inner.read(name, partition, start, max_records=LAST_PROBE, timeout=1.0)
        return batch[-1].position if batch else -1

    async def position_at(self, name: str, partition: int, timestamp_ms: int) -> int:
        return await self.inner.position_at(name, partition, timestamp_ms)

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        await self.inner.commit(name, group, positions)

    async def committed(self, name: str, group: str) -> dict[int, int]:
        return await self.inner.committed(name, group)

    async def backlog(
        self, name: str, group: str, committed: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        """``committed`` (what the caller knows it committed) is an optional shortcut of the
        protocol; the inner store is asked for the group's positions itself."""
        return await self.inner.backlog(name, group)

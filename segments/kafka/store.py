"""``KafkaSegmentStore``: the ``SegmentStore`` on a Kafka cluster (confluent-kafka).

A storage topic is a Kafka topic, a position a Kafka offset. Writes go through one idempotent
``acks=all`` producer per store (``producer``); reads through cached assign-only consumers and
the AdminClient (``consumer``); topics, configs and the fence through the AdminClient here.

**The fence.** Kafka cannot terminate a topic, so ``seal`` builds a fence from a topic config
that the partition leader checks on every append:

1. ``max.message.bytes=0`` is set with ``incremental_alter_configs``. The KRaft controller has
   committed it to the metadata log when it answers, so it is durable (restarts, new leaders);
   it is also the seal mark that ``is_sealed`` reads back with ``describe_configs``. A record
   batch has a 61-byte header, so from then on the leader refuses every produce with
   MESSAGE_TOO_LARGE, a non-retriable error, whoever sends it — another process's idempotent
   producer opened long before included: the size is checked before the producer id and
   sequence, so not even a retry of an old batch gets through.
2. Brokers apply a config change asynchronously. ``seal`` probes every partition until each
   leader refuses with MESSAGE_TOO_LARGE; from that moment P, every append that leader
   validates sees the zero limit. Probes are never stored: they are stamped a century ahead and
   our topics refuse records more than an hour ahead (``message.timestamp.after.max.ms``), so a
   leader without the fence answers INVALID_TIMESTAMP instead.
3. The broker checks the size *before* it takes the log lock and assigns offsets
   (``UnifiedLog.append``), so a batch validated just before the config swap may be appended
   after P. Hence ``seal`` waits ``produce_timeout_s`` (plus slack) after P and only then reads
   the high watermarks as the end positions. Such a batch was handed over at some T < P; an
   httpbus producer fails any record whose delivery report comes later than T +
   ``produce_timeout_s`` (see ``producer``), so if it is acknowledged at all, its report came
   before P + ``produce_timeout_s``, i.e. before we read the high watermark. An ``acks=all``
   acknowledgement is sent only once the high watermark has passed the record, and the high
   watermark never moves back. So every acknowledged record lies below the returned end, and
   every write handed over after P is refused: no message is ever acknowledged at an offset
   >= the end.
4. The ends are recorded as the committed offsets of the consumer group ``__httpbus_seal`` (the
   broker drops them with the topic), so sealing again returns exactly the same positions at
   once. Should they expire (``offsets.retention.minutes``), a seal simply runs again. They
   are looked up only when the fence is already up (it is never lowered, so a topic without
   it has no recorded ends): a first fence costs no group read.

**Fence first, settle after** (what a cutover uses). ``fence`` runs steps 1 and 2 and reads
the ends at once, as provisional ends: the fence is in force within tens of milliseconds, so
a cutover moves its produce pointer then, and producers do not pause for step 3. ``seal``
afterwards waits the settle and returns the final ends, which readers wait for.

**Short settle** (``fence_settle_s``, or a cutover's ``seal(settle_s=…)``). With a short settle
S the ends are read S after P, so the guarantee narrows to: a batch the leader validated before
the swap is below the ends unless the broker took longer than S between validating it and
appending it (normally microseconds: the size check and the append run in one request). Of the
writers that could have such a batch in flight, a cutover leaves only producers that missed the
switch (lost metastore session): every producer that took part drained its writes before it
acknowledged SWITCH, so none is in flight at the seal. A cutover passes ``seal(settle_s=…)``
only when every live producer acknowledged SWITCH (docs/cutover.md).

Rejected alternative: ``min.insync.replicas`` above the replication factor fences nothing, the
broker uses ``min(min.insync.replicas, replication factor)`` (``Partition.effectiveMinIsr``).

Limits: the argument assumes every writer of a segment is an httpbus store of the cluster with
the same ``produce_timeout_s``. The recorded ends can be passed, never by an acknowledged
record, in two corner cases: a batch validated before the swap whose append a broker thread
stalls for longer than ``produce_timeout_s``, and (replication > 1) a record appended before P
and replicated only later. Readers stop at the recorded ends, so nobody reads those records,
and no caller was told they were stored. A broker that replays a leadership change and the
config change in one metadata batch could, as new leader, take writes for the instant between
the two (multi-broker clusters only). A seal takes about ``produce_timeout_s``.

Example::

    async with KafkaSegmentStore(KafkaSettings("127.0.0.1:9092")) as store:
        await store.create_topic("orders.s1", 3, retention_ms=86_400_000)
        produced = await store.produce("orders.s1", Record(b"{}", key=b"customer-7"))
        ends = await store.seal("orders.s1")
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from core.errors import HttpbusError, NotFound, SegmentFenced, TooLarge, ValidationFailed
from core.lifecycle import AsyncResource

from ..protocol import Fence, Produced, Record, Stored, partition_for
from .commits import CommitClient
from .config import MAX_FUTURE_TIMESTAMP_MS, SEAL_GROUP, KafkaSettings
from .consumer import (
    PartitionReaders,
    end_offsets,
    offset_at,
    start_offsets,
)
from .errors import resolve, retrying, translate, unavailable
from .follow import Followers
from .offsets import GroupOffsets
from .producer import DurableProducer, probe_until_refused

_FENCE = "max.message.bytes"


class KafkaSegmentStore(AsyncResource):
    """The Kafka ``SegmentStore``: durable (``acks=all``, idempotent), fenced by topic config."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._timeout = settings.produce_timeout_s
        self._admin: Any = None
        self._producer = DurableProducer(settings)
        self._readers = PartitionReaders(settings)
        self._follows = Followers(settings)  # reads in sequence; _readers the others
        self._groups = GroupOffsets(settings)  # not the AdminClient's: see .offsets
        self._commits = CommitClient(settings)  # a client of their own: see .commits
        self._counts: dict[str, int] = {}  # partition counts seen; a segment never grows
        self._sealed: set[str] = set()  # a seal is forever, so only True is cached
        self._fenced: set[str] = set()  # fenced here, and every leader was seen refusing
        self._round_robin = itertools.count()
        self._started = False

    async def start(self) -> None:
        """Create the clients; no broker is contacted yet (a dead one fails the first call)."""
        if self._started:
            return
        try:
            self._admin = AdminClient(self._settings.admin())
        except KafkaException as exc:
            raise translate(exc, "create admin client") from exc
        self._producer.start(asyncio.get_running_loop(), also_poll=self._admin.poll)
        self._started = True

    async def aclose(self) -> None:
        if not self._started:
            return
        self._started = False
        await self._producer.close()
        await self._follows.close()
        await self._readers.close()
        await self._groups.close()

    async def create_topic(self, name: str, partitions: int, *, retention_ms: int) -> None:
        """Create the topic and return once every partition has a leader."""
        if partitions < 1:
            raise ValidationFailed(f"kafka: {name}: partitions must be >= 1, not {partitions}")
        deadline = time.monotonic() + self._timeout
        topic = NewTopic(
            name,
            num_partitions=partitions,
            replication_factor=self._settings.replication_factor,
            config=self._settings.topic_config(retention_ms),
        )
        futures = self._admin.create_topics(
            [topic], operation_timeout=self._timeout, request_timeout=self._timeout
        )
        await resolve(futures[name], timeout=self._timeout, what=f"create topic {name}")
        await self._await_metadata(name, lambda t: _ready(t, partitions), deadline)
        self._counts[name] = partitions

    async def delete_topic(self, name: str) -> None:
        """Delete the topic; returns once the brokers' metadata no longer has it."""
        deadline = time.monotonic() + self._timeout
        futures = self._admin.delete_topics(
            [name], operation_timeout=self._timeout, request_timeout=self._timeout
        )
        await resolve(futures[name], timeout=self._timeout, what=f"delete topic {name}")
        self._counts.pop(name, None)
        self._sealed.discard(name)
        self._fenced.discard(name)
        self._readers.forget(name)
        self._follows.forget(name)
        await self._await_metadata(name, lambda t: t is None, deadline)

    async def partitions(self, name: str) -> int | None:
        return await self._lookup(name, self._timeout)

    async def abandon_unsent(self) -> None:
        """Fail at once, as never stored, every record this process has queued for the
        cluster and not sent yet (all topics: librdkafka purges per producer). A failover
        calls it on the cluster it leaves, so the segment writer writes those records to
        the new segment instead of waiting out the produce timeout (docs/failover.md)."""
        self._producer.purge_unsent()

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        count = await self._count(name, time.monotonic() + self._timeout)
        if partition is None:
            partition = partition_for(record.key, count, next(self._round_robin))
        elif not 0 <= partition < count:
            raise NotFound(f"kafka: {name} has no partition {partition}")
        [outcome] = await self._send(name, [(partition, record)])
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def produce_many(
        self, name: str, records: Sequence[Record]
    ) -> list[Produced | Exception]:
        count = await self._count(name, time.monotonic() + self._timeout)
        items = [(partition_for(r.key, count, next(self._round_robin)), r) for r in records]
        return list(await self._send(name, items))

    async def _send(
        self, name: str, items: list[tuple[int, Record]]
    ) -> list[Produced | HttpbusError]:
        if name in self._sealed:
            return [_fenced(name) for _ in items]
        outcomes = await self._producer.send_many(name, items)
        if any(isinstance(o, NotFound) for o in outcomes):
            self._counts.pop(name, None)  # deleted behind our back
        if any(isinstance(o, TooLarge) for o in outcomes) and await self.is_sealed(name):
            return [_fenced(name) if isinstance(o, TooLarge) else o for o in outcomes]
        return outcomes

    async def open_producers(self, name: str) -> None:
        """Learn the topic's partitions now, so the first writes do not pay for it (a
        cutover's PREPARE calls this on the target segment)."""
        await self._count(name, time.monotonic() + self._timeout)

    async def read(
        self,
        name: str,
        partition: int,
        start: int,
        *,
        max_records: int = 500,
        timeout: float = 1.0,
    ) -> list[Stored]:
        count = await self._count(name, time.monotonic() + self._timeout)
        if not 0 <= partition < count:
            raise NotFound(f"kafka: {name} has no partition {partition}")
        try:
            got = await self._follows.read(name, partition, start, max_records, timeout)
            if got is None:
                got = await self._readers.read(name, partition, start, max_records, timeout)
                if self._follows.ended(name, partition, start, got):
                    self._readers.close_reader(name, partition)
            return got
        except NotFound:
            self._counts.pop(name, None)  # deleted behind our back
            raise

    def read_clients(self) -> dict[str, int]:
        """How reads are served now: partitions followed by the shared consumer, and the
        partition readers open for the other reads (.follow says which go where)."""
        return {"followed": self._follows.following(), "partition_readers": len(self._readers)}

    async def end_positions(self, name: str) -> dict[int, int]:
        count = await self._count(name, time.monotonic() + self._timeout)
        return await self._ends(name, count)

    async def last_positions(self, name: str) -> dict[int, int]:
        """The offset before the end where retention left one: our writers are idempotent, not
        transactional, so offsets are dense (an adopted topic's writers may be transactional:
        ``segments.external`` looks for its last record instead)."""
        count = await self._count(name, time.monotonic() + self._timeout)
        ends, starts = await asyncio.gather(self._ends(name, count), self._starts(name, count))
        return {p: ends[p] - 1 if ends[p] > starts.get(p, 0) else -1 for p in range(count)}

    async def seal(self, name: str, *, settle_s: float | None = None) -> dict[int, int]:
        """Fence the topic and return its final ends (the module docstring has the argument);
        ``settle_s`` replaces the settings' settle (see "Short settle")."""
        count, recorded = await self._raise_fence(name)
        if recorded is not None:
            return recorded
        await asyncio.sleep(self._settings.settle_s if settle_s is None else settle_s)
        ends = await self._ends(name, count)
        await self._commit_offsets(SEAL_GROUP, name, ends)
        return ends

    async def fence(self, name: str) -> Fence:
        """Steps 1 and 2 of the seal, and the ends read at once: provisional, as a batch
        validated before the fence may still land (step 3); ``seal`` gives the final ones."""
        count, recorded = await self._raise_fence(name)
        if recorded is not None:
            return Fence(recorded, final=True)
        return Fence(await self._ends(name, count), final=False)

    async def _raise_fence(self, name: str) -> tuple[int, dict[int, int] | None]:
        """Fence ``name`` (steps 1 and 2) unless this store did already; its partition count,
        and the recorded final ends if a seal finished before."""
        count, configs = await asyncio.gather(  # both before the fence: one round trip
            self._count(name, time.monotonic() + self._timeout, fresh=True), self._configs(name)
        )
        if configs.get(_FENCE) == "0":  # raised before (never lowered): a seal may be done
            recorded = await self._group_offsets(SEAL_GROUP, name, count)
            if len(recorded) == count:
                self._sealed.add(name)
                return count, recorded
        if name in self._fenced:  # raised here, every leader seen refusing: no need again
            return count, None
        ahead = configs.get("message.timestamp.after.max.ms", str(2**63 - 1))
        if int(ahead) > MAX_FUTURE_TIMESTAMP_MS:  # our probes could be stored
            raise HttpbusError(f"kafka: cannot seal {name}: not a topic created by httpbus")
        await self._alter(name, {_FENCE: "0"})
        self._sealed.add(name)
        await asyncio.to_thread(probe_until_refused, self._settings, name, count, self._timeout)
        self._fenced.add(name)
        return count, None

    async def is_sealed(self, name: str) -> bool:
        """Whether the fence is up (writes refused). Read from the broker until it says yes:
        a stale "no" could only delay a ``SegmentFenced``, never turn a refusal into an ack."""
        if name in self._sealed:
            return True
        if (await self._configs(name)).get(_FENCE) == "0":
            self._sealed.add(name)
            return True
        return False

    async def position_at(self, name: str, partition: int, timestamp_ms: int) -> int:
        count = await self._count(name, time.monotonic() + self._timeout)
        if not 0 <= partition < count:
            raise NotFound(f"kafka: {name} has no partition {partition}")
        found = await retrying(
            lambda: offset_at(self._admin, name, partition, timestamp_ms, self._timeout),
            timeout=self._timeout,
            what=f"position of {timestamp_ms} in {name}",
        )
        if found is not None:
            return found
        return (await self._ends(name, count))[partition]

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        _check_group(group)
        count = await self._count(name, time.monotonic() + self._timeout)
        for partition, position in positions.items():
            if not 0 <= partition < count:
                raise NotFound(f"kafka: {name} has no partition {partition}")
            if position < 0:
                raise ValidationFailed(f"kafka: cannot commit position {position}")
        await self._commit_offsets(group, name, positions)

    async def committed(self, name: str, group: str) -> dict[int, int]:
        _check_group(group)
        count = await self._count(name, time.monotonic() + self._timeout)
        return await self._group_offsets(group, name, count)

    async def backlog(
        self, name: str, group: str, committed: Mapping[int, int] | None = None
    ) -> dict[int, int]:
        """End offset minus the committed one (or the log start, if later or never
        committed): like Kafka's consumer lag, transaction markers count as messages."""
        _check_group(group)
        count = await self._count(name, time.monotonic() + self._timeout)
        ends, starts, fetched = await asyncio.gather(
            self._ends(name, count),
            self._starts(name, count),
            self._known_or_fetched(group, name, count, committed),
        )
        return {p: max(0, ends[p] - max(fetched.get(p, 0), starts.get(p, 0))) for p in range(count)}

    async def _known_or_fetched(
        self, group: str, name: str, count: int, known: Mapping[int, int] | None
    ) -> Mapping[int, int]:
        return known if known is not None else await self._group_offsets(group, name, count)

    async def _count(self, name: str, deadline: float, *, fresh: bool = False) -> int:
        """The partition count of an existing topic (cached); ``NotFound`` if absent."""
        if not fresh and name in self._counts:
            return self._counts[name]
        count = await self._lookup(name, max(0.0, deadline - time.monotonic()))
        if count is None:
            raise NotFound(f"kafka: no topic {name}")
        self._counts[name] = count
        return count

    async def _ends(self, name: str, count: int) -> dict[int, int]:
        return await retrying(
            lambda: end_offsets(self._admin, name, count, self._timeout),
            timeout=self._timeout,
            what=f"end positions of {name}",
        )

    async def _starts(self, name: str, count: int) -> dict[int, int]:
        return await retrying(
            lambda: start_offsets(self._admin, name, count, self._timeout),
            timeout=self._timeout,
            what=f"start positions of {name}",
        )

    async def _group_offsets(self, group: str, name: str, count: int) -> dict[int, int]:
        # Bounded and retried by the read itself, from when a thread takes it (.offsets).
        return await self._groups.committed(group, name, count, self._timeout)

    async def _commit_offsets(self, group: str, name: str, positions: dict[int, int]) -> None:
        await self._commits.commit(group, name, positions, self._timeout)

    async def _lookup(self, name: str, timeout: float) -> int | None:
        """The partition count from fresh broker metadata; None if the topic does not exist."""
        topic = await self._metadata(name, timeout)
        return None if topic is None else len(topic.partitions)

    async def _metadata(self, name: str, timeout: float) -> Any:
        """The topic's metadata, fresh from a broker; None if the topic does not exist."""
        what = f"describe topic {name}"
        try:
            async with asyncio.timeout(timeout + 0.5):
                metadata = await asyncio.to_thread(
                    self._admin.list_topics, topic=name, timeout=timeout
                )
        except TimeoutError as exc:
            raise unavailable(what, f"got no answer within {timeout:g}s") from exc
        except KafkaException as exc:
            raise translate(exc, what) from exc
        topic = metadata.topics.get(name)
        if topic is None:
            return None
        if topic.error is not None:
            error = translate(topic.error, what)
            if isinstance(error, NotFound):
                return None
            raise error
        return topic

    async def _await_metadata(
        self, name: str, done: Callable[[Any], bool], deadline: float
    ) -> None:
        """Poll the metadata until ``done(topic metadata or None)``; brokers learn of a
        created or deleted topic a moment after the controller answers."""
        while not done(await self._metadata(name, max(0.1, deadline - time.monotonic()))):
            if time.monotonic() > deadline:
                raise unavailable(f"create or delete {name}", "not visible in time")
            await asyncio.sleep(0.05)

    async def _configs(self, name: str) -> dict[str, str]:
        what = f"describe configs of {name}"

        async def describe() -> Any:
            resource = ConfigResource("topic", name)
            futures = self._admin.describe_configs([resource], request_timeout=self._timeout)
            return await resolve(futures[resource], timeout=self._timeout, what=what)

        entries = await retrying(describe, timeout=self._timeout, what=what)
        return {key: entry.value for key, entry in entries.items()}

    async def _alter(self, name: str, configs: dict[str, str]) -> None:
        what = f"alter configs of {name}"

        async def alter() -> None:
            entries = [
                ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
                for key, value in configs.items()
            ]
            resource = ConfigResource("topic", name, incremental_configs=entries)
            futures = self._admin.incremental_alter_configs(
                [resource], request_timeout=self._timeout
            )
            await resolve(futures[resource], timeout=self._timeout, what=what)

        await retrying(alter, timeout=self._timeout, what=what)


def _ready(topic: Any, partitions: int) -> bool:
    """Whether a created topic has all its partitions, each with a leader."""
    if topic is None or len(topic.partitions) != partitions:
        return False
    return all(p.leader >= 0 and p.error is None for p in topic.partitions.values())


def _fenced(name: str) -> SegmentFenced:
    return SegmentFenced(f"kafka: {name} is sealed", details={"backend": "kafka"})


def _check_group(group: str) -> None:
    if group == SEAL_GROUP:
        raise ValidationFailed(f"kafka: the group {SEAL_GROUP} is reserved")

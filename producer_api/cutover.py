"""The producer's part in a cutover (``segments.cutover``): follow, hold, drain, release.

For every topic it serves, the producer watches the topic's cutover document. While a
cutover runs, the topic has a :class:`Gate` in :attr:`CutoverParticipant.gates`; a topic
without one costs the hot path a single dict lookup. The gate follows the phase:

- PREPARE: open the target segment's storage (so the first write after the switch does not
  pay for it) and acknowledge; writes go on to the old segment, counted in flight;
- SWITCH: hold new requests (each at most ``hold_timeout_s``, then 503 ``cutover_timeout``
  with ``Retry-After``), wait for the writes in flight to finish, acknowledge;
- COMMIT: once the commit transaction has moved the pointer, re-read the topic, release the
  held requests to the new segment and acknowledge; ROLLED_BACK / ABORTED release them to
  the old one.

A producer whose metastore session is lost (or replaced) cannot know whether a cutover
moved on without it: it answers 503 for every topic it knows to be in cutover until it has
read that topic's state again. The same holds for every topic it serves that names standby
clusters: a failover needs no seal, so nothing would refuse its writes to the old segment
after the switch (docs/failover.md). Whatever it does, the fence of the sealed segment refuses a
write that missed the switch, so no client gets a 2xx for a message consumers will not see.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime

from core.errors import CutoverTimeout, HttpbusError, MetaStoreUnavailable
from core.lifecycle import AsyncResource
from core.model import Topic
from core.tasks import stop_if_cancelled
from metastore import paths
from metastore.protocol import MetaStore
from segments.cutover.machine import TERMINAL, Cutover, Mode, Phase, producer_mode
from segments.cutover.records import CutoverRecords
from segments.protocol import Record, SegmentStore
from segments.writer import SegmentWriter, Written

from .metadata import TopicCache

log = logging.getLogger(__name__)
Key = tuple[str, str]
_SESSION_CHECK_S = 0.2


def utcnow() -> datetime:
    return datetime.now(UTC)


class Gate:
    """One topic's cutover as the hot path sees it: hold, count in flight, release."""

    def __init__(self, key: Key, cache: TopicCache, hold_timeout_s: float) -> None:
        self.key = key
        self.cache = cache
        self.hold_timeout_s = hold_timeout_s
        self.mode = Mode.OLD
        self.out_of_sync = False
        self.cutover_id = ""
        self.inflight = 0
        self._drained = asyncio.Event()
        self._drained.set()
        self._changed = asyncio.Event()

    def set_mode(self, mode: Mode, *, out_of_sync: bool = False) -> None:
        self.mode, self.out_of_sync = mode, out_of_sync
        self._changed.set()
        self._changed = asyncio.Event()  # waiters hold the old one, now set

    async def admit(self, topic: Topic) -> Topic:
        """The topic to write, once this request may go (bounded wait while held)."""
        deadline = time.monotonic() + self.hold_timeout_s
        while self.mode is Mode.HOLD or self.out_of_sync:
            if self.out_of_sync:
                raise MetaStoreUnavailable(
                    f"topic {self.key[0]}/{self.key[1]} is in a cutover and this producer lost "
                    "its metastore session; retry",
                    retry_after=1,
                )
            left = deadline - time.monotonic()
            if left <= 0:
                raise CutoverTimeout(
                    f"topic {self.key[0]}/{self.key[1]} is switching segments; retry",
                    retry_after=1,
                )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await self._changed.wait()
        if self.mode is Mode.NEW:
            return await self.cache.topic(*self.key)
        return topic

    def enter(self) -> None:
        self.inflight += 1
        self._drained.clear()

    def leave(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._drained.set()

    @contextlib.asynccontextmanager
    async def _passing(self, topic: Topic) -> AsyncIterator[Topic]:
        """Admit a write and count it in flight until it is done (a switch drains them)."""
        admitted = await self.admit(topic)
        self.enter()
        try:
            yield admitted
        finally:
            self.leave()

    async def write(self, writer: SegmentWriter, topic: Topic, record: Record) -> Written:
        async with self._passing(topic) as admitted:
            return await writer.write(admitted, record)

    async def write_many(
        self, writer: SegmentWriter, topic: Topic, records: list[Record]
    ) -> list[Written | Exception]:
        async with self._passing(topic) as admitted:
            return await writer.write_many(admitted, records)

    async def drained(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._drained.wait()
        return self.inflight == 0


@dataclass(eq=False)
class CutoverParticipant(AsyncResource):
    """Follows the cutovers of the topics this producer serves (see the module doc)."""

    metastore: MetaStore
    member_id: str
    stores: Mapping[str, SegmentStore]
    cache: TopicCache
    _: KW_ONLY
    hold_timeout_s: float = 5.0
    drain_timeout_s: float = 30.0
    now: Callable[[], datetime] = utcnow
    gates: dict[Key, Gate] = field(default_factory=dict, init=False)
    _followed: dict[Key, asyncio.Task[None]] = field(default_factory=dict, init=False)
    _first_reads: dict[Key, asyncio.Future[None]] = field(default_factory=dict, init=False)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self.records = CutoverRecords(self.metastore)
        self._session: object = getattr(self.metastore, "session_id", None)

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._watch_active())]
        if hasattr(self.metastore, "session_id"):
            self._tasks.append(asyncio.create_task(self._watch_session()))

    async def aclose(self) -> None:
        tasks = [*self._followed.values(), *self._tasks]
        self._followed.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_active(self) -> None:
        """Take part in every cutover, also of topics this producer has not served yet:
        the coordinator waits for every live producer."""
        while True:
            try:
                async for names in self.metastore.watch_children(paths.ACTIVE_CUTOVERS):
                    for name in names:
                        project, _, topic = name.partition(":")
                        await self.follow((project, topic))
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                stop_if_cancelled(exc)
                log.warning("watching the active cutovers: %s", exc)
                await asyncio.sleep(0.5)

    async def follow(self, key: Key) -> None:
        """Called by the topic cache when it loads a topic (and for every active cutover):
        read its cutover now, so the first request already sees a gate, then follow it."""
        first = self._first_reads.get(key)
        if first is None:
            first = self._first_reads[key] = asyncio.ensure_future(self._first_read(key))
        try:
            await asyncio.shield(first)
        except HttpbusError:
            self._first_reads.pop(key, None)  # the next caller tries again
            raise

    async def _first_read(self, key: Key) -> None:
        found = await self.records.get(*key)
        if found is not None:
            self._apply_mode(key, found[0])
        self._followed[key] = asyncio.create_task(self._follow(key))

    async def _follow(self, key: Key) -> None:
        while True:
            try:
                async for state in self.records.watch(*key):
                    if state is not None:
                        await self._on_state(key, state)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed round must not end the following
                stop_if_cancelled(exc)
                log.warning("cutover of %s/%s: %s", *key, exc)
                await asyncio.sleep(0.5)

    def _apply_mode(self, key: Key, state: Cutover) -> Gate | None:
        """Install, update or remove the gate for ``state`` (no I/O, so the hot path sees a
        consistent gate at once)."""
        if state.phase in TERMINAL:
            gate = self.gates.pop(key, None)
            if gate is not None:
                gate.set_mode(producer_mode(state))
            return None
        gate = self.gates.get(key)
        if gate is None:
            gate = self.gates[key] = Gate(key, self.cache, self.hold_timeout_s)
        gate.cutover_id = state.id
        mode = producer_mode(state)
        if mode is Mode.NEW:
            mode = Mode.HOLD  # released by _on_state once the topic is re-read
        gate.set_mode(mode)
        return gate

    async def _on_state(self, key: Key, state: Cutover) -> None:
        moved = state.phase is Phase.COMPLETE or (
            state.phase is Phase.COMMIT and state.pointer_moved
        )
        if moved and self.cache.cached(*key):
            await self.cache.refresh(*key)  # the new pointer, before anyone is released
        gate = self._apply_mode(key, state)
        if gate is None:
            return
        mine = state.producers.get(self.member_id)
        if state.phase is Phase.PREPARE and state.target_ready:
            if mine is None or mine.prepared_at is None:
                if await self._open_target(state):
                    await self._ack(key, state, Phase.PREPARE)
        elif state.phase is Phase.SWITCH and (mine is None or mine.switched_at is None):
            # A failover does not drain: writes in flight to the dead cluster end in their
            # own time, and what they stored is read before the new segment (ordered mode).
            if state.failover or await gate.drained(self.drain_timeout_s):
                await self._ack(key, state, Phase.SWITCH)
        elif state.phase is Phase.COMMIT and state.pointer_moved:
            gate.set_mode(Mode.NEW)
            if state.failover and (mine is None or mine.committed_at is None):
                await self._abandon_unsent(key, state)
            if mine is None or mine.committed_at is None:
                await self._ack(key, state, Phase.COMMIT)

    async def _open_target(self, state: Cutover) -> bool:
        """Open the target's storage; False (never acknowledged, so the cutover rolls back
        at its deadline) if this producer cannot write the target cluster."""
        store = self.stores.get(state.cluster)
        if store is None:
            log.error("cutover %s: cluster %s is not configured here", state.id, state.cluster)
            return False
        opener = getattr(store, "open_producers", None)  # backends that can open ahead
        if opener is not None:
            await opener(state.storage_topic)
        else:
            await store.partitions(state.storage_topic)
        return True

    async def _abandon_unsent(self, key: Key, state: Cutover) -> None:
        """A failover left the old segment: the records still queued for its cluster (never
        sent) fail at once as not stored, and the writer writes them to the new segment,
        instead of their callers waiting out the produce timeout on a dead cluster."""
        topic = await self.cache.topic(*key)
        old = topic.segment(state.from_segment)
        store = self.stores.get(old.cluster) if old is not None else None
        abandon = getattr(store, "abandon_unsent", None)  # backends that queue locally
        if abandon is not None:
            await abandon()

    async def _ack(self, key: Key, state: Cutover, phase: Phase) -> None:
        await self.records.ack(*key, state.id, self.member_id, phase, self.now())

    async def _watch_session(self) -> None:
        """A lost or replaced session: every gated topic answers 503 until re-read."""
        while True:
            await asyncio.sleep(_SESSION_CHECK_S)
            session = getattr(self.metastore, "session_id", None)
            if session == self._session and session is not None:
                continue
            for gate in self.gates.values():
                gate.set_mode(gate.mode, out_of_sync=True)
            for topic in self.cache.loaded():
                key = (topic.project, topic.name)
                if topic.failover is not None and key not in self.gates:
                    gate = self.gates[key] = Gate(key, self.cache, self.hold_timeout_s)
                    gate.set_mode(Mode.OLD, out_of_sync=True)
            if session is None:
                continue
            if await self._resync():
                self._session = session

    async def _resync(self) -> bool:
        try:
            for key in list(self.gates):
                if self.cache.cached(*key):  # a failover may have moved its pointer meanwhile
                    await self.cache.refresh(*key)
                found = await self.records.get(*key)
                if found is None:
                    self.gates.pop(key, None)
                else:
                    await self._on_state(key, found[0])
        except HttpbusError as exc:
            log.warning("cutover re-sync failed: %s", exc)
            return False
        return True

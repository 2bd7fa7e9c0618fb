"""Idempotent publish: the message ids a topic accepted within its dedupe window, shared by
every producer process through the metastore (docs/producing.md, "Idempotent publish").

Time is cut into buckets as long as the window ``W``. An id claimed at time ``now`` is
written to two nodes, in its bucket ``B = now // W * W`` and in the next one ``B + W``, in
one transaction (:func:`metastore.paths.dedupe_id`). A later publish of the same id within
``W`` falls in bucket ``B`` or ``B + W`` and its own transaction creates the node that is
already there, so it fails: of two processes racing with the same id, **exactly one
transaction succeeds**, whatever their buckets. Lookups never read older buckets, so a
bucket older than the previous one is deleted whole (:meth:`DedupeStore.sweep`), never
node by node by age.

A claim is *pending* (owned by a producer, written before the storage write) until
:meth:`DedupeStore.record` stores the message's place in it, or :meth:`DedupeStore.release`
deletes it when the write failed. A publish that finds a pending claim waits for it (up to
``wait_s``, then ``DuplicateInFlight``, 503), or takes it over at once if its owner is no
live producer any more (a crashed process) or it is older than ``stale_s`` (a publish never
takes that long); a compare-and-set, so one taker wins.

    store = DedupeStore(metastore, member_id="producer-1")
    found = await store.claim("shop", "orders", "order-42", window_ms=600_000, now_ms=now)
    if isinstance(found, Original):
        ...  # answer 200, duplicate, with found.segment / partition / position
    else:
        written = await write(...)
        await store.record(found, written.segment_id, written.partition, written.position)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass

from core.errors import (
    AlreadyExists,
    DuplicateInFlight,
    HttpbusError,
    NotFound,
    VersionConflict,
)

from . import paths
from .protocol import Create, Delete, MetaStore, Node, Op, Update

log = logging.getLogger(__name__)
PRODUCERS = "producers"  # the membership group of producer processes (producer_api.app)


@dataclass(frozen=True, slots=True)
class Original:
    """Where the first publish of an id was stored."""

    message_id: str
    segment: int
    partition: int
    position: int


@dataclass(frozen=True, slots=True)
class Claim:
    """This process owns the id's two nodes, at these versions, until it records or
    releases them."""

    message_id: str
    nodes: tuple[tuple[str, int], ...]
    at_ms: int


class _Coalescer:
    """Transactions of concurrent publishes joined into one multi-op (at most ``parallel``
    in flight, each of at most ``max_ops`` ops): under load a few round trips to the
    metastore carry many claims. Alone, a transaction goes at once, as it is. When a joint
    transaction fails (an id was claimed already: the usual duplicate), each of its parts
    is tried again alone, concurrently, so each gets its own outcome."""

    def __init__(self, store: MetaStore, parallel: int = 4, max_ops: int = 256) -> None:
        self.store = store
        self.parallel = parallel
        self.max_ops = max_ops
        self._queue: list[tuple[list[Op], asyncio.Future[None]]] = []
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def transaction(self, ops: list[Op]) -> None:
        done = asyncio.get_running_loop().create_future()
        self._queue.append((ops, done))
        if self._running < self.parallel:
            self._running += 1
            task = asyncio.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        await done

    async def _drain(self) -> None:
        try:
            while self._queue:
                group: list[tuple[list[Op], asyncio.Future[None]]] = []
                size = 0
                while self._queue and (not group or size + len(self._queue[0][0]) <= self.max_ops):
                    ops, done = self._queue.pop(0)
                    group.append((ops, done))
                    size += len(ops)
                await self._apply(group)
        finally:
            self._running -= 1

    async def _apply(self, group: list[tuple[list[Op], asyncio.Future[None]]]) -> None:
        if len(group) > 1:
            try:
                await self.store.transaction([op for ops, _ in group for op in ops])
            except HttpbusError:
                pass  # one part failed (or the store did): each alone below
            else:
                for _, done in group:
                    if not done.done():
                        done.set_result(None)
                return
        outcomes = await asyncio.gather(
            *(self.store.transaction(ops) for ops, _ in group), return_exceptions=True
        )
        for (_, done), outcome in zip(group, outcomes, strict=True):
            if done.done():
                continue
            if isinstance(outcome, BaseException):
                done.set_exception(outcome)
            else:
                done.set_result(None)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


class DedupeStore:
    def __init__(
        self,
        store: MetaStore,
        member_id: str,
        *,
        wait_s: float = 5.0,
        poll_s: float = 0.02,
        stale_s: float = 60.0,
    ) -> None:
        self.store = store
        self.member_id = member_id
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.stale_ms = int(stale_s * 1000)
        self._tx = _Coalescer(store)
        self._swept: dict[tuple[str, str], int] = {}
        self._sweeps: set[asyncio.Task[int]] = set()
        self._records: set[asyncio.Task[None]] = set()

    async def claim(
        self, project: str, topic: str, message_id: str, window_ms: int, now_ms: int
    ) -> Claim | Original:
        """Claim ``message_id`` for a write, or the place of its original if it was stored
        within ``window_ms``. ``DuplicateInFlight`` if another live producer is still
        storing it after ``wait_s``."""
        start = now_ms // window_ms * window_ms
        self._maybe_sweep(project, topic, start, window_ms)
        here = paths.dedupe_id(project, topic, start, message_id)
        after = paths.dedupe_id(project, topic, start + window_ms, message_id)
        mine = _pending(self.member_id, now_ms)
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                await self._tx.transaction([Create(here, mine), Create(after, mine)])
                return Claim(message_id, ((here, 0), (after, 0)), now_ms)
            except AlreadyExists:
                pass
            first, second = await asyncio.gather(self.store.get(here), self.store.get(after))
            found = first or second
            if found is None:
                continue  # released meanwhile: claim again
            record = json.loads(found.data)
            expired = record["at"] < now_ms - window_ms
            if not expired and "s" in record:
                return Original(message_id, record["s"], record["p"], record["o"])
            stale = record["at"] < now_ms - self.stale_ms  # a publish never takes this long
            if expired or stale or not await self._live(record["by"]):
                taken = await self._take_over(((here, first), (after, second)), mine)
                if taken is not None:
                    return Claim(message_id, taken, now_ms)
                continue  # another process took it first: look again
            if time.monotonic() >= deadline:
                raise DuplicateInFlight(
                    f"message {message_id} is being stored by another request; retry",
                    retry_after=1,
                )
            await asyncio.sleep(self.poll_s)

    async def record(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        """Store the message's place in its claim: later publishes of its id are answered
        with it. A claim taken over meanwhile (this process was thought dead) is logged:
        the message may then be stored twice."""
        data = json.dumps(
            {"at": claim.at_ms, "by": self.member_id, "s": segment, "p": partition, "o": position}
        ).encode()
        ops: list[Op] = [Update(path, data, version) for path, version in claim.nodes]
        try:
            await self._tx.transaction(ops)
        except (VersionConflict, NotFound):
            log.warning("the dedupe claim of %s was taken over before it was recorded", claim)

    def record_soon(self, claim: Claim, segment: int, partition: int, position: int) -> None:
        """:meth:`record` in the background: the answer to the client does not wait for
        the metastore's second round trip. Until it lands, a publish of the same id waits
        for it as for any claim in flight; :meth:`aclose` waits for every one."""
        task = asyncio.create_task(self.record(claim, segment, partition, position))
        self._records.add(task)
        task.add_done_callback(self._records.discard)

    async def release(self, claim: Claim) -> None:
        """Give the id up after a failed write, so a retry may store it."""
        ops: list[Op] = [Delete(path, version) for path, version in claim.nodes]
        with contextlib.suppress(HttpbusError):
            await self._tx.transaction(ops)

    async def _take_over(
        self, nodes: tuple[tuple[str, Node | None], ...], data: bytes
    ) -> tuple[tuple[str, int], ...] | None:
        """Replace an expired or orphaned claim with ours: one compare-and-set for both
        nodes, so of two takers one wins; None if we lost."""
        ops: list[Op] = [
            Create(path, data) if node is None else Update(path, data, node.version)
            for path, node in nodes
        ]
        try:
            await self._tx.transaction(ops)
        except (AlreadyExists, VersionConflict, NotFound):
            return None
        return tuple((path, 0 if node is None else node.version + 1) for path, node in nodes)

    async def _live(self, member: str) -> bool:
        if member == self.member_id:
            return True
        return member in await self.store.members(PRODUCERS)

    def _maybe_sweep(self, project: str, topic: str, start: int, window_ms: int) -> None:
        """Once per bucket and topic in this process, delete the buckets no lookup reads
        any more (older than the previous one), in the background."""
        key = (project, topic)
        if self._swept.get(key) == start:
            return
        self._swept[key] = start
        task = asyncio.create_task(self.sweep(project, topic, start - window_ms))
        self._sweeps.add(task)
        task.add_done_callback(self._sweeps.discard)

    async def sweep(self, project: str, topic: str, keep_from_ms: int) -> int:
        """Delete the topic's buckets that start before ``keep_from_ms``; each under an
        ephemeral lock, so producers do not delete the same bucket twice. The number
        deleted here."""
        deleted = 0
        try:
            names = await self.store.children(paths.dedupe_topic(project, topic))
            for name in names:
                if not name.isdigit() or int(name) >= keep_from_ms:
                    continue
                lock = paths.dedupe_sweep(project, topic, int(name))
                try:
                    await self.store.create(lock, b"", ephemeral=True)
                except AlreadyExists:
                    continue  # another producer is on it
                try:
                    await self._delete_bucket(paths.dedupe_bucket(project, topic, int(name)))
                    deleted += 1
                finally:
                    with contextlib.suppress(HttpbusError):
                        await self.store.delete(lock)
        except HttpbusError as exc:  # the next bucket's sweep tries again
            log.warning("dedupe sweep of %s/%s failed: %s", project, topic, exc)
        return deleted

    async def forget(self, project: str, topic: str) -> None:
        """Delete every id of a topic (the topic is deleted: a new one of the same name
        starts with none)."""
        where = paths.dedupe_topic(project, topic)
        for name in await self.store.children(where):
            await self._delete_bucket(f"{where}/{name}")
        with contextlib.suppress(NotFound):
            await self.store.delete(where, recursive=True)

    async def _delete_bucket(self, bucket: str) -> None:
        # Shard by shard: a recursive delete is one multi-op, and a whole bucket's could
        # pass ZooKeeper's 1 MB request limit.
        for shard in await self.store.children(bucket):
            with contextlib.suppress(NotFound):
                await self.store.delete(f"{bucket}/{shard}", recursive=True)
        with contextlib.suppress(NotFound):
            await self.store.delete(bucket, recursive=True)

    async def aclose(self) -> None:
        await asyncio.gather(*self._records, return_exceptions=True)  # before the session ends
        await self._tx.aclose()
        for task in list(self._sweeps):
            task.cancel()
        await asyncio.gather(*self._sweeps, return_exceptions=True)


def _pending(member_id: str, now_ms: int) -> bytes:
    return json.dumps({"at": now_ms, "by": member_id}).encode()

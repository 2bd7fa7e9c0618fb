"""Operations on a running subscription: stop / start, seek, status.

**Stop / start** flip the subscription's ``paused`` flag (a compare-and-set, retried on a
concurrent edit). The worker holding the subscription watches it: it stops the runner at
once (in-flight deliveries are cancelled, nothing more is committed) and starts it again
from the committed positions on start, so nothing is skipped.

**Enable** clears a subscription's ``disabled`` field (set by the worker that saw its
endpoint fail every attempt for ``endpoint.disable_after_s``, ``delivery_workers.disabling``):
first the recorded failing streak ``/failing/{p}:{s}`` is deleted, so the clock starts over,
then the field is cleared by compare-and-set; the worker starts the runner from the
committed positions, so every message not delivered yet is delivered. ``start`` only ends a
pause: a disabled subscription stays disabled until ``enable`` (an operator resuming a
paused subscription does not re-arm a dead endpoint by accident).

**Seek** moves what a subscription reads next, while no worker runs it:

1. create the request node ``/seeks/{p}:{s}`` (one seek at a time: 409 otherwise); the
   worker holding the subscription stops its runner and releases the lock
   ``/locks/subscriptions/{p}:{s}``, and no worker takes it while the request exists;
2. take that lock ourselves (bounded: ``lock_wait_s``; a worker that died holding it
   releases it when its session expires), so the seek never races a runner;
3. find the target segment and the positions per partition (``SegmentStore.position_at``:
   Kafka offsets-for-times, a Pulsar scan by publish time, an index seek on embedded);
   commit them for the subscription's commit group; reset every later segment to its
   earliest position (so the subscription reads them again when it advances); move the
   consume pointer to the target segment by compare-and-set;
4. delete the request and release the lock: the worker takes it and runs from there.

A runner's last commit may still be on the wire when it is cancelled, so the seek commits
twice, ``STALE_COMMIT_S`` apart.

The target (earliest, latest or a timestamp) is found as a subscription's start at create is
(:mod:`segments.positions`).

**Status** combines the figures the worker publishes (``/status/{p}:{s}``, see
``delivery_workers.status``) with the committed positions, end positions and backlog of the
consume segment, read from storage. What the DLQ holds (``dlq``: size, failed heads,
sidelined followers) is the count the worker publishes with its figures
(``delivery_workers.dlq_count``: a scan when it takes the subscription, then its tail of
the DLQ, removals by a purge or an unsideline included; while paused or disabled, a read of
what was appended every few seconds), so a status does not read the DLQ; only when no worker
counts it now (unassigned, or ``live`` false: its storage was away) is the DLQ read once from
storage, for this one subscription. The list and the overview show the published count
alone (:meth:`SubscriptionOps.listed`).

A sharded subscription (``docs/shards.md``) is sought with every shard's lock taken and
every shard's commit group written; its status adds up the shards (:mod:`.shard_status`)
and lists each shard with its worker, state and lag.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from control_plane.services import dead_letters
from control_plane.services.shard_status import (
    dlq_figures,
    merge_figures,
    merge_partitions,
    worst_circuit,
)
from core.errors import AlreadyExists, HttpbusError, InUse, NotFound, VersionConflict
from core.model import Segment, SegmentState, Subscription, Topic
from core.shards import Shard, shards, unit_key
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import Node
from segments.positions import earliest, locate, readable
from segments.protocol import SegmentStore
from segments.reader import commit_group, floor

LOCK_WAIT_S = 15.0
LOCK_POLL_S = 0.1
STALE_COMMIT_S = 0.3
BUCKET_S = 10
HISTORY_S = 3_600


@dataclass(frozen=True)
class SeekTarget:
    """Where to seek: ``to`` earliest / latest, or the first message at ``timestamp``."""

    to: Literal["earliest", "latest"] | None = None
    timestamp: datetime | None = None


@dataclass(frozen=True)
class SeekResult:
    segment: int
    positions: dict[int, int]


class SubscriptionOps:
    """Stop, start, seek and status of subscriptions (see the module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        stores: Mapping[str, SegmentStore],
        member_id: str,
        *,
        lock_wait_s: float = LOCK_WAIT_S,
    ) -> None:
        self.catalog = catalog
        self.meta = catalog.store
        self.stores = stores
        self.member_id = member_id
        self.lock_wait_s = lock_wait_s

    def _store(self, segment: Segment) -> SegmentStore:
        store = self.stores.get(segment.cluster)
        if store is None:
            raise NotFound(f"storage cluster {segment.cluster!r} is not configured here")
        return store

    # ------------------------------------------------------------ stop / start
    async def set_paused(self, project: str, name: str, paused: bool) -> Subscription:
        """Pause or resume; idempotent."""
        for _ in range(10):
            sub = await self.catalog.get_subscription(project, name)
            if sub.paused == paused:
                return sub
            with contextlib.suppress(VersionConflict):
                return await self.catalog.update_subscription(
                    sub.model_copy(update={"paused": paused})
                )
        raise VersionConflict(f"subscription {project}/{name} keeps changing; try again")

    async def enable(self, project: str, name: str) -> Subscription:
        """Enable a disabled subscription (see the module doc); idempotent."""
        sub = await self.catalog.get_subscription(project, name)
        if sub.disabled is None:
            return sub
        with contextlib.suppress(NotFound):
            await self.meta.delete(paths.endpoint_failing(project, name))
        for _ in range(10):
            sub = await self.catalog.get_subscription(project, name)
            if sub.disabled is None:
                return sub
            with contextlib.suppress(VersionConflict):
                return await self.catalog.update_subscription(
                    sub.model_copy(update={"disabled": None})
                )
        raise VersionConflict(f"subscription {project}/{name} keeps changing; try again")

    # ------------------------------------------------------------ seek
    async def seek(self, project: str, name: str, target: SeekTarget) -> SeekResult:
        async with self.stepped_aside(project, name) as sub:
            return await self._seek_locked(sub, target)

    @contextlib.asynccontextmanager
    async def stepped_aside(self, project: str, name: str) -> AsyncIterator[Subscription]:
        """While no worker runs the subscription (steps 1, 2 and 4 of a seek): the
        subscription as it was. A resend uses it to make the internal topics of a
        subscription that has none yet, so its runners read them from their start."""
        sub = await self.catalog.get_subscription(project, name)
        request = paths.seek_request(project, name)
        stamp = json.dumps({"by": self.member_id, "at_ms": int(time.time() * 1000)}).encode()
        try:
            # Ephemeral: a control plane that dies mid-seek does not keep s stopped.
            await self.meta.create(request, stamp, ephemeral=True)
        except AlreadyExists:
            raise InUse(f"a seek of {project}/{name} is in progress; try again") from None
        taken: dict[str, bytes] = {}
        try:
            for shard in shards(sub.shards):
                lock = paths.subscription_lock(project, name, _index(shard))
                taken[lock] = await self._take_lock(lock, unit_key(project, name, shard))
            yield sub
        finally:
            with contextlib.suppress(HttpbusError):
                await self.meta.delete(request)
            for lock, token in taken.items():
                with contextlib.suppress(HttpbusError):
                    node = await self.meta.get(lock)
                    if node is not None and node.data == token:
                        await self.meta.delete(lock, expected_version=node.version)

    async def _take_lock(self, lock: str, key: str) -> bytes:
        token = json.dumps({"member": self.member_id, "seek": uuid.uuid4().hex}).encode()
        deadline = time.monotonic() + self.lock_wait_s
        while True:
            try:
                await self.meta.create(lock, token, ephemeral=True)
                return token
            except AlreadyExists:
                if time.monotonic() > deadline:
                    raise InUse(
                        f"the worker running {key} did not stop within {self.lock_wait_s:g} s "
                        "(if it died, its session has not expired yet); try again"
                    ) from None
                await asyncio.sleep(LOCK_POLL_S)

    async def _seek_locked(self, sub: Subscription, target: SeekTarget) -> SeekResult:
        topic = await self.catalog.get_topic(sub.topic_project, sub.topic)
        at = target.timestamp if target.timestamp is not None else (target.to or "latest")
        segment, positions = await locate(topic, self.stores, at)
        groups = [commit_group(sub, shard) for shard in shards(sub.shards)]
        await self._commit_checked(segment, groups, positions)
        for later in (s for s in readable(topic) if s.id > segment.id):
            await self._commit_checked(later, groups, await earliest(self._store(later), later))
        fresh = await self.catalog.get_subscription(sub.project, sub.name)
        if fresh.consume_pointer is None or fresh.consume_pointer.segment_id != segment.id:
            await self.catalog.move_consume_pointer(fresh, segment.id)
        return SeekResult(segment.id, positions)

    async def _commit_checked(
        self, segment: Segment, groups: list[str], positions: dict[int, int]
    ) -> None:
        store = self._store(segment)
        for group in groups:
            await store.commit(segment.storage_topic, group, positions)
        # A cancelled runner's last commit was sent before it let the lock go, so it lands
        # within moments: committing once more after a pause overwrites it if it came late.
        await asyncio.sleep(STALE_COMMIT_S)
        for group in groups:
            await store.commit(segment.storage_topic, group, positions)

    # ------------------------------------------------------------ status
    async def status(self, project: str, name: str, *, range_s: int = HISTORY_S) -> dict[str, Any]:
        """The figures of the module doc; ``history`` covers the last ``range_s`` seconds
        (at most the hour the workers keep)."""
        sub = await self.catalog.get_subscription(project, name)
        topic = await self.catalog.get_topic(sub.topic_project, sub.topic)
        segment_id = sub.consume_pointer.segment_id if sub.consume_pointer else None
        segment = topic.segment(segment_id) if segment_id is not None else None
        units = await asyncio.gather(
            *(self._shard_status(sub, shard, segment) for shard in shards(sub.shards))
        )
        figures = merge_figures([u.figures for u in units])
        partitions = merge_partitions([u.partitions for u in units])
        holder = next((u.worker for u in units if u.worker), None)
        dlq_found = await self._dlq(sub, figures.get("dlq"))
        state = _state(sub, [u.state for u in units])
        totals = figures.get("totals", {})
        body = {
            "subscription": f"{project}/{name}",
            "state": state,
            "worker": figures.get("worker") or holder,
            "segment": segment_id,
            "partitions": partitions,
            "lag": sum(p["lag"] for p in partitions),
            "in_flight": int(figures.get("in_flight", 0)),
            "rates": {
                k: float(figures.get("rates", {}).get(k, 0.0))
                for k in ("delivered_per_s", "failed_per_s", "filtered_per_s")
            },
            "totals": {
                k: int(totals.get(k, 0))
                for k in (
                    "delivered",
                    "failed",
                    "filtered",
                    "retried",
                    "dead_lettered",
                    "sidelined",
                )
            },
            "circuit": figures.get("circuit"),
            "dlq": dlq_found,
            "failures": {str(k): int(v) for k, v in (figures.get("failures") or {}).items()},
            "last_failure": _failure(figures.get("last_failure")),
            "oldest_unacked_at": _stamp(figures.get("oldest_unacked_ms")),
            # Commits failing (the storage away) while delivery goes on: since when.
            "commit_failing_since": _stamp(figures.get("commit_failing_since_ms")),
            "disabled": sub.disabled.model_dump(mode="json") if sub.disabled else None,
            "state_detail": sub.disabled.describe() if sub.disabled else state,
            "waiting": waiting_for(topic, segment),
            "history": _history(figures.get("history", []), time.time(), range_s),
            "updated_at": figures.get("updated_at"),
        }
        if sub.shards > 1:
            body["shards"] = [u.row() for u in units]
        return body

    async def _dlq(self, sub: Subscription, counted: object) -> dict[str, object] | None:
        """What the DLQ holds: the workers' live count, else read from storage once (see
        the module doc); the last count if storage does not answer, else None."""
        published = dlq_figures(counted)
        if published is not None and published["live"]:
            return published
        try:
            found = await dead_letters.summary(self.meta, self.stores, sub)
        except HttpbusError:
            return published
        return {
            "size": found.size,
            "failed_heads": found.failed_heads,
            "sidelined": found.sidelined,
            "counted_by": "storage",
            "live": True,
        }

    async def listed(self, subs: Sequence[Subscription]) -> list[Listed]:
        """The circuit (the least healthy shard's), the DLQ count and the last failure of
        each of ``subs`` as its workers last published them, from the metastore alone, every
        shard's status in one bulk read: cheap enough for every row of a list. None where no
        worker has reported."""
        wanted = [
            [
                paths.subscription_status(s.project, s.name, _index(shard))
                for shard in shards(s.shards)
            ]
            for s in subs
        ]
        found = iter(await self.meta.get_many([path for one in wanted for path in one]))
        return [_listed([n for n in (next(found) for _ in one) if n is not None]) for one in wanted]

    async def _shard_status(
        self, sub: Subscription, shard: Shard, segment: Segment | None
    ) -> _Unit:
        """What the metastore and the storage say of one shard (or the whole)."""
        index = _index(shard)
        published = await self.meta.get(paths.subscription_status(sub.project, sub.name, index))
        lock = await self.meta.get(paths.subscription_lock(sub.project, sub.name, index))
        figures: dict[str, Any] = json.loads(published.data) if published else {}
        holder = json.loads(lock.data).get("member") if lock else None
        state = _held_state(sub) or ("running" if lock or published else "unassigned")
        rows = await self._partitions(sub, segment, shard) if segment is not None else []
        return _Unit(shard, figures.get("worker") or holder, state, figures, rows)

    async def _partitions(
        self, sub: Subscription, segment: Segment, shard: Shard
    ) -> list[dict[str, int]]:
        if segment.state is SegmentState.UNSEALED:  # its cluster may be down: not asked
            return []
        try:
            store, group = self._store(segment), commit_group(sub, shard)
            committed, ends, backlog = await asyncio.gather(
                store.committed(segment.storage_topic, group),
                store.end_positions(segment.storage_topic),
                store.backlog(segment.storage_topic, group),
            )
        except HttpbusError:  # storage away or the segment gone: the worker's figures remain
            return []
        return [
            {
                "partition": p,
                "committed": committed.get(p, floor(sub, segment, p)),
                "end": ends.get(p, 0),
                "lag": backlog.get(p, 0),
            }
            for p in range(segment.partitions)
            if shard.reads(p, segment.partitions)
        ]


def _listed(found: list[Node]) -> Listed:
    docs = [json.loads(doc.data) for doc in found]
    worst = worst_circuit(docs)
    circuit = str(worst["state"]) if worst and worst.get("state") else None
    merged = merge_figures(docs) if docs else {}
    failure = _failure(merged.get("last_failure"))
    if failure is not None:
        failure.pop("answer", None)  # a list row names the error; the page shows the answer
    return Listed(circuit, dlq_figures(merged.get("dlq")), failure)


@dataclass(frozen=True)
class Listed:
    """A subscription's figures for a row of a list: circuit state, DLQ count, last failure
    (``at``, ``status``, ``error``)."""

    circuit: str | None
    dlq: dict[str, Any] | None
    last_failure: dict[str, object] | None = None


@dataclass(frozen=True)
class _Unit:
    """One shard's part of a status."""

    shard: Shard
    worker: str | None
    state: str
    figures: dict[str, Any]
    partitions: list[dict[str, int]]

    def row(self) -> dict[str, Any]:
        return {
            "shard": self.shard.index,
            "worker": self.worker,
            "state": self.state,
            "lag": sum(p["lag"] for p in self.partitions),
        }


def _index(shard: Shard) -> int | None:
    return None if shard.whole else shard.index


def _held_state(sub: Subscription) -> str | None:
    """disabled (its endpoint failed too long), paused, or None: neither."""
    if sub.disabled is not None:
        return "disabled"
    return "paused" if sub.paused else None


def waiting_for(topic: Topic, segment: Segment | None) -> str | None:
    """Why a subscription's deliveries wait, when a failover is the reason (else None)."""
    if segment is None or segment.state is not SegmentState.UNSEALED:
        return None
    return (
        f"segment {segment.id} was left unsealed by a failover: its cluster {segment.cluster} "
        "could not be reached; deliveries of the next segment wait until the cluster is back "
        "and this one is sealed and read to its end (ordered failover)"
    )


def _state(sub: Subscription, states: list[str]) -> str:
    """disabled, paused, running (some shard runs), or unassigned (none does)."""
    return _held_state(sub) or ("running" if "running" in states else "unassigned")


def _history(
    rows: list[list[int | None]], now: float, range_s: int = HISTORY_S
) -> list[dict[str, int | None]]:
    """Every 10-second bucket of the last ``range_s`` seconds, oldest first, the missing
    ones as zeros; ``lag`` is the last lag the worker measured in the bucket (None: none)."""
    got = {int(r[0] or 0): r for r in rows if len(r) >= 4}
    last = int(now) // BUCKET_S * BUCKET_S
    span = max(BUCKET_S, min(HISTORY_S, range_s)) // BUCKET_S * BUCKET_S
    out: list[dict[str, int | None]] = []
    for t in range(last - span + BUCKET_S, last + BUCKET_S, BUCKET_S):
        row = got.get(t, [])
        out.append(
            {
                "t": t,
                "delivered": int(row[1] or 0) if row else 0,
                "failed": int(row[2] or 0) if row else 0,
                "filtered": int(row[3] or 0) if row else 0,
                "dead_lettered": int(row[4] or 0) if len(row) > 4 else 0,
                "lag": row[5] if len(row) > 5 else None,
            }
        )
    return out


def _stamp(ms: object) -> str | None:
    """Epoch milliseconds as RFC 3339 (None stays None)."""
    if not isinstance(ms, int) or ms <= 0:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")


def _failure(found: object) -> dict[str, object] | None:
    """The newest failed attempt a worker published, its time as RFC 3339."""
    if not isinstance(found, dict):
        return None
    return {
        "at": _stamp(found.get("at_ms")),
        "status": found.get("status"),
        "error": found.get("error"),
        "answer": found.get("answer"),
    }

"""Replaying a window of a topic into one subscription: from the archive and from storage
(docs/archive.md, "Replay into one subscription").

``POST …/subscriptions/{s}/replay {since, until, rate}`` records a request at
``/replays/{p}:{s}`` (one at a time per subscription); the control plane elected to the
role ``replayer`` (:mod:`control_plane.leaders.replayer`) carries it out with
:func:`run_replay`:

1. **Collect** every message of the subscription's topic accepted in ``[since, until)``:
   from the archived windows that overlap it (:mod:`.archive`), then from what storage still
   holds past the archive's cursor (every readable segment; a topic without an archive: all
   of storage from about ``since`` on). A message id is taken once.
2. **Order** them as storage did: by segment, partition and position, so the messages of a
   group keep their order (a group lives in one partition of a segment).
3. **Write** them, ``rate`` a second, to the subscription's *replay topic* — the one a resend
   and a DLQ unsideline use (:mod:`.resends`) — marked as a window replay
   (``segments.subscription.dlq.WINDOW``) and ``x-replay: true``. The worker holding the
   subscription reads them in order, audits ``replayed`` (the message's trace shows it),
   runs each through the subscription's filter and delivers it through its own dispatch
   (group order, rate limit, circuit), signing, retries and DLQ, with ``X-Replay: true``.
   Nothing is written where another subscription reads.

The record says how far it got (``written`` of ``total``); a new leader starts a replay
that was running again and skips what was written (a crash between a write and the record
writes a batch twice: at least once, like every delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from control_plane.services import archive as archives
from control_plane.services.operations import SubscriptionOps
from core.archive import ArchiveStorage, iso
from core.envelope import Envelope
from core.errors import AlreadyExists, InUse, NotFound, ValidationFailed
from core.model import Segment, SegmentState, Subscription, Topic
from metastore import paths
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore, Stored
from segments.scan import read_range
from segments.subscription import dlq
from segments.subscription.layout import Layout, ensure_layout, load_layout

MAX_MESSAGES = 1_000_000
SKEW_MS = 5 * 60_000  # how far a partition's accept times may run out of order
_READ = 500
_READ_TIMEOUT_S = 2.0
_SKIPPED = (SegmentState.PENDING, SegmentState.RETIRED)

State = Literal["pending", "running", "done", "failed"]


class Replay(BaseModel):
    """A window replay of one subscription and its progress."""

    id: str
    project: str
    subscription: str
    since_ms: int
    until_ms: int
    rate: int = Field(description="messages a second written to the subscription")
    state: State = "pending"
    total: int | None = Field(default=None, description="messages in the window (once known)")
    written: int = Field(default=0, description="handed to the subscription so far")
    from_archive: int = 0
    from_storage: int = 0
    error: str | None = None
    created_ms: int
    finished_ms: int | None = None

    @property
    def open(self) -> bool:
        return self.state in ("pending", "running")

    def view(self) -> dict[str, object]:
        """What the API shows (times in RFC 3339)."""
        return {
            "id": self.id,
            "subscription": f"{self.project}/{self.subscription}",
            "since": iso(self.since_ms),
            "until": iso(self.until_ms),
            "rate": self.rate,
            "state": self.state,
            "total": self.total,
            "written": self.written,
            "from_archive": self.from_archive,
            "from_storage": self.from_storage,
            "error": self.error,
            "created": iso(self.created_ms),
            "finished": iso(self.finished_ms) if self.finished_ms is not None else None,
        }


async def start(
    catalog: Catalog, project: str, name: str, since_ms: int, until_ms: int, rate: int
) -> Replay:
    """Record a replay request of ``project/name``; ``InUse`` while another is open."""
    await catalog.get_subscription(project, name)  # 404 first
    if since_ms >= until_ms:
        raise ValidationFailed("since must be before until")
    now = int(time.time() * 1000)
    replay = Replay(
        id=uuid.uuid4().hex[:12],
        project=project,
        subscription=name,
        since_ms=since_ms,
        until_ms=until_ms,
        rate=rate,
        created_ms=now,
    )
    meta, path = catalog.store, paths.replay(project, name)
    data = replay.model_dump_json().encode()
    try:
        await meta.create(path, data)
        return replay
    except AlreadyExists:
        pass
    node = await meta.get(path)
    if node is not None:
        current = Replay.model_validate_json(node.data)
        if current.open:
            raise InUse(
                f"replay {current.id} of {project}/{name} is {current.state} "
                f"({current.written} of {current.total if current.total is not None else '?'} "
                "written): wait for it (httpbus sub replay-status)"
            )
        await meta.update(path, data, expected_version=node.version)
    else:
        await meta.create(path, data)
    return replay


async def status(catalog: Catalog, project: str, name: str) -> Replay:
    """The subscription's latest replay; ``NotFound`` if it never had one."""
    node = await catalog.store.get(paths.replay(project, name))
    if node is None:
        await catalog.get_subscription(project, name)  # a 404 naming the subscription first
        raise NotFound(f"subscription {project}/{name} was never replayed")
    return Replay.model_validate_json(node.data)


async def open_replays(meta: MetaStore) -> list[Replay]:
    """Every replay still pending or running."""
    found = []
    for child in await meta.children(paths.REPLAYS):
        named = paths.parse_replay(child)
        node = await meta.get(f"{paths.REPLAYS}/{child}") if named else None
        if node is not None:
            replay = Replay.model_validate_json(node.data)
            if replay.open:
                found.append(replay)
    return found


async def save(meta: MetaStore, replay: Replay) -> None:
    """Store the replay's progress (only the replayer writes a replay once it runs)."""
    path = paths.replay(replay.project, replay.subscription)
    node = await meta.get(path)
    if node is None:
        return  # the subscription was deleted meanwhile
    await meta.update(path, replay.model_dump_json().encode(), expected_version=node.version)


Sleep = Callable[[float], Awaitable[None]]


async def run_replay(
    catalog: Catalog,
    stores: Mapping[str, SegmentStore],
    storage: ArchiveStorage,
    ops: SubscriptionOps,
    replay: Replay,
    *,
    sleep: Sleep = asyncio.sleep,
) -> Replay:
    """Carry ``replay`` out (module doc); the replay as it ended, stored."""
    sub = await catalog.get_subscription(replay.project, replay.subscription)
    topic = await catalog.get_topic(sub.topic_project, sub.topic)
    window = await collect(topic, stores, storage, replay.since_ms, replay.until_ms)
    replay.total = len(window.messages)
    replay.from_archive, replay.from_storage = window.from_archive, window.from_storage
    replay.state = "running"
    await save(catalog.store, replay)
    layout = await _layout(catalog, stores, ops, sub, topic)
    store = stores[layout.cluster]
    qualified = f"{topic.project}/{topic.name}"
    started = time.monotonic()
    already = replay.written
    while replay.written < replay.total:
        batch = window.messages[replay.written : replay.written + replay.rate]
        await dlq.replay_window(store, layout, batch, qualified)
        replay.written += len(batch)
        await save(catalog.store, replay)
        # Pace: ``rate`` a second from the start of this run.
        due = started + (replay.written - already) / replay.rate
        await sleep(max(0.0, due - time.monotonic()))
    replay.state = "done"
    replay.finished_ms = int(time.time() * 1000)
    await save(catalog.store, replay)
    return replay


async def _layout(
    catalog: Catalog,
    stores: Mapping[str, SegmentStore],
    ops: SubscriptionOps,
    sub: Subscription,
    topic: Topic,
) -> Layout:
    """The subscription's internal topics, made while no worker runs it if it has none yet
    (as a resend does)."""
    layout = await load_layout(catalog.store, sub)
    if layout is not None:
        return layout
    async with ops.stepped_aside(sub.project, sub.name) as held:
        pointer = held.consume_pointer
        consume = topic.segment(pointer.segment_id) if pointer is not None else None
        cluster = (consume or topic.segments[-1]).cluster
        return await ensure_layout(catalog.store, dict(stores), held, cluster)


@dataclass
class Window:
    """A window's messages in storage order, each with its origin."""

    messages: list[tuple[Stored, str]] = field(default_factory=list)
    from_archive: int = 0
    from_storage: int = 0


async def collect(
    topic: Topic,
    stores: Mapping[str, SegmentStore],
    storage: ArchiveStorage,
    since_ms: int,
    until_ms: int,
) -> Window:
    """Every message of ``topic`` accepted in ``[since_ms, until_ms)``, once, in storage order."""
    found: dict[str, tuple[tuple[int, int, int], Stored, str]] = {}
    cursor: archives.ArchiveState | None = None
    from_archive = 0
    if topic.archive is not None:
        objects = archives.objects_of(storage, topic.archive)
        cursor = await archives.load_state(objects)
        for window in cursor.windows:
            if window.end_ms <= since_ms - SKEW_MS or window.start_ms >= until_ms + SKEW_MS:
                continue  # a neighbour may hold a late message of the window: read those too
            for row in await archives.read_window(objects, window):
                if since_ms <= row["produced_at"] < until_ms and row["id"] not in found:
                    found[row["id"]] = _from_row(row)
                    from_archive += 1
    before = len(found)
    for seg in sorted(topic.segments, key=lambda s: s.id):
        if seg.state not in _SKIPPED:
            await _from_storage(seg, stores, cursor, since_ms, until_ms, found)
    ordered = sorted(found.values(), key=lambda item: item[0])
    if len(ordered) > MAX_MESSAGES:
        raise ValidationFailed(
            f"the window holds {len(ordered)} messages, more than {MAX_MESSAGES} in one replay: "
            "replay it in narrower windows"
        )
    return Window(
        messages=[(msg, origin) for _, msg, origin in ordered],
        from_archive=from_archive,
        from_storage=len(found) - before,
    )


def _from_row(row: dict[str, Any]) -> tuple[tuple[int, int, int], Stored, str]:
    """An archived row as the message storage held (a row of :func:`.archive.read_window`)."""
    seg, part, pos = int(row["segment"]), int(row["partition"]), int(row["position"])
    msg = Stored(
        partition=part,
        position=pos,
        timestamp_ms=int(row["produced_at"]),
        value=bytes(row["payload"]),
        key=None if row["key"] is None else bytes(row["key"]),
        headers=tuple((str(h["name"]), bytes(h["value"])) for h in row["headers"]),
    )
    return (seg, part, pos), msg, f"{seg}:{part}:{pos}"


async def _from_storage(
    seg: Segment,
    stores: Mapping[str, SegmentStore],
    cursor: archives.ArchiveState | None,
    since_ms: int,
    until_ms: int,
    found: dict[str, tuple[tuple[int, int, int], Stored, str]],
) -> None:
    """What ``seg`` still holds of the window past the archive's cursor (no archive: from the
    first position accepted about ``since_ms`` on)."""
    store = stores.get(seg.cluster)
    if store is None:
        raise NotFound(f"segment {seg.id} is on cluster {seg.cluster!r}: not configured here")
    if seg.finished and seg.end_positions is not None:
        ends = dict(seg.end_positions)
    else:
        ends = await store.end_positions(seg.storage_topic)
    for p in range(seg.partitions):
        end = ends.get(p, 0)
        if cursor is not None and cursor.next_ms is not None:
            pos = cursor.position(seg, p)
        else:
            pos = max(
                seg.start_of(p), await store.position_at(seg.storage_topic, p, since_ms - SKEW_MS)
            )
        batches = read_range(
            store, seg.storage_topic, p, pos, end, timeout=_READ_TIMEOUT_S, max_records=_READ
        )
        async with contextlib.aclosing(batches):
            async for batch in batches:
                if not _collect(seg, p, batch, since_ms, until_ms, found):
                    break  # past the window: the rest of the partition is later still


def _collect(
    seg: Segment,
    partition: int,
    batch: list[Stored],
    since_ms: int,
    until_ms: int,
    found: dict[str, tuple[tuple[int, int, int], Stored, str]],
) -> bool:
    """Keep ``batch``'s messages produced in the window; False once one is past it."""
    for msg in batch:
        env = Envelope.of(msg.headers)
        at = archives.produced_ms(msg, env)
        if at >= until_ms + SKEW_MS:
            return False
        where = f"{seg.id}:{partition}:{msg.position}"
        mid = env.message_id or where
        if since_ms <= at < until_ms and mid not in found:
            found[mid] = ((seg.id, partition, msg.position), msg, where)
    return True

"""Archiving a topic's closed windows to Parquet, and listing what is archived (docs/archive.md).

**What a round does** (:func:`archive_topic`). The archive keeps its own state beside the
files (:data:`STATE`, JSON): a *cursor* (per segment and partition, the next position to
read) and ``next_ms``, the start of the next window to write. While that window is closed
(its end plus ``grace`` has passed), every readable segment of the timeline (Kafka, Pulsar;
not PENDING, not RETIRED) is read from the cursor until the first message produced at or
after the window's end, and what was read is written as one Parquet file
(:func:`core.archive.window_key`), ids unique within it (a copy stored twice, by a producer's
retry or across a cutover, is written once: the first in timeline order). Only then does the
state move on. A crash between the two writes the same window again from the same cursor:
the same file, replaced.

**Each message once.** The cursor is a position, so a message is read into exactly one
window's file. A message accepted before a window's end that reached storage after the
window closed (later than ``grace``), or that sits behind a later message of its partition
(two producer processes' clocks), is written into the next window's file: its
``produced_at`` column still says when it was accepted, and a replay filters on that.

**Retention.** With ``keep_days``, windows whose date is older are deleted, file and entry.

The file's columns: ``id``, ``group``, ``produced_at`` (UTC, ms), ``segment``, ``partition``,
``position``, ``key``, ``headers`` (name, value: every stored header), ``payload``.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from control_plane.services.archive_objects import ArchiveObjects, open_objects
from core.archive import DAY_MS, ArchiveSpec, ArchiveStorage, iso, window_key, window_start
from core.envelope import Envelope
from core.errors import StorageUnavailable
from core.model import Segment, SegmentState, Topic
from segments.protocol import SegmentStore, Stored

log = logging.getLogger(__name__)
STATE = "_httpbus_archive.json"
_READ = 500
_READ_TIMEOUT_S = 2.0
_SKIPPED = (SegmentState.PENDING, SegmentState.RETIRED)


class Window(BaseModel):
    """One archived window."""

    start_ms: int
    end_ms: int
    key: str = Field(description="the file, under the archive's URL")
    messages: int
    duplicates: int = Field(description="copies of a message already in the file, left out")
    bytes: int
    archived_at_ms: int


class ArchiveState(BaseModel):
    """What :data:`STATE` holds (module doc)."""

    version: int = 1
    next_ms: int | None = None
    cursor: dict[str, dict[str, int]] = Field(default_factory=dict)
    windows: list[Window] = Field(default_factory=list)

    def position(self, segment: Segment, partition: int) -> int:
        at = self.cursor.get(str(segment.id), {}).get(str(partition))
        return segment.start_of(partition) if at is None else at


def objects_of(storage: ArchiveStorage, spec: ArchiveSpec) -> ArchiveObjects:
    """The objects of a topic's archive, as the control plane's settings reach them."""
    return open_objects(storage, spec.to)


async def load_state(objects: ArchiveObjects) -> ArchiveState:
    """The archive's state (empty when it has none yet). A state file that is not one (cut
    short, written by hand) is ``StorageUnavailable``, naming it: neither the listing nor the
    archiver can go on from it, and starting afresh would write every window again."""
    raw = await objects.get_bytes(STATE)
    if raw is None:
        return ArchiveState()
    try:
        return ArchiveState.model_validate_json(raw)
    except ValidationError as exc:
        problem = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        raise StorageUnavailable(
            f"archive {objects.url}: {STATE} is not an archive state ({problem}): restore it "
            "from a copy, or set a new --archive-to"
        ) from exc


async def save_state(objects: ArchiveObjects, state: ArchiveState) -> None:
    await objects.put_bytes(STATE, state.model_dump_json().encode())


COLUMNS = (
    "id",
    "group",
    "produced_at",
    "segment",
    "partition",
    "position",
    "key",
    "headers",
    "payload",
)


@dataclass
class Rows:
    """One window's rows as columns, ids unique."""

    columns: dict[str, list[Any]] = field(default_factory=lambda: {c: [] for c in COLUMNS})
    ids: set[str] = field(default_factory=set)
    duplicates: int = 0

    def add(self, segment: int, msg: Stored, env: Envelope, produced_ms: int) -> None:
        mid = env.message_id or f"{segment}:{msg.partition}:{msg.position}"
        if mid in self.ids:
            self.duplicates += 1
            return
        self.ids.add(mid)
        values = (
            mid,
            env.group,
            produced_ms,
            segment,
            msg.partition,
            msg.position,
            msg.key,
            [{"name": k, "value": v} for k, v in msg.headers],
            msg.value,
        )
        for column, value in zip(COLUMNS, values, strict=True):
            self.columns[column].append(value)

    def __len__(self) -> int:
        return len(self.ids)


def schema() -> Any:
    import pyarrow as pa

    header = pa.struct([("name", pa.string()), ("value", pa.binary())])
    return pa.schema(
        [
            ("id", pa.string()),
            ("group", pa.string()),
            ("produced_at", pa.timestamp("ms", tz="UTC")),
            ("segment", pa.int32()),
            ("partition", pa.int32()),
            ("position", pa.int64()),
            ("key", pa.binary()),
            ("headers", pa.list_(header)),
            ("payload", pa.binary()),
        ]
    )


def produced_ms(msg: Stored, env: Envelope) -> int:
    """When the message was accepted: its ``x-produced-at``, else the storage timestamp."""
    return env.produced_at_ms if env.produced_at_ms is not None else msg.timestamp_ms


@dataclass(frozen=True)
class Round:
    """What one :func:`archive_topic` wrote and deleted."""

    written: list[Window]
    deleted: list[Window]


async def archive_topic(
    topic: Topic,
    spec: ArchiveSpec,
    objects: ArchiveObjects,
    stores: Mapping[str, SegmentStore],
    now_ms: int,
    grace_ms: int,
    *,
    max_windows: int = 48,
) -> Round:
    """Archive every closed window of ``topic`` past the state, at most ``max_windows`` in
    one round (the next round goes on), then apply ``keep_days``."""
    state = await load_state(objects)
    segments = [s for s in sorted(topic.segments, key=lambda s: s.id) if s.state not in _SKIPPED]
    written: list[Window] = []
    every = spec.every_ms
    if state.next_ms is None:
        first = await _earliest(segments, stores, state)
        if first is not None:
            state.next_ms = window_start(first, every)
    while (
        state.next_ms is not None
        and state.next_ms + every + grace_ms <= now_ms
        and len(written) < max_windows
    ):
        start = state.next_ms
        rows, heads = await _read_window(segments, stores, state, start + every)
        if len(rows) or rows.duplicates:
            window = await _write(objects, rows, start, start + every, now_ms)
            state.windows.append(window)
            written.append(window)
            state.next_ms = start + every
        else:  # nothing in it: on to the window of the next message stored, if closed
            upcoming = min(heads, default=now_ms - grace_ms)
            state.next_ms = max(start + every, window_start(upcoming, every))
        await save_state(objects, state)
    deleted = await _expire(objects, state, spec, now_ms)
    return Round(written, deleted)


async def _earliest(
    segments: list[Segment], stores: Mapping[str, SegmentStore], state: ArchiveState
) -> int | None:
    """The accept time of the first unread message of any partition, or None."""
    found: list[int] = []
    for seg in segments:
        store = _store(stores, seg)
        for p in range(seg.partitions):
            start = state.position(seg, p)
            batch = await store.read(seg.storage_topic, p, start, max_records=1, timeout=0.5)
            if batch:
                found.append(produced_ms(batch[0], Envelope.of(batch[0].headers)))
    return min(found, default=None)


async def _read_window(
    segments: list[Segment],
    stores: Mapping[str, SegmentStore],
    state: ArchiveState,
    end_ms: int,
) -> tuple[Rows, list[int]]:
    """Every unread message produced before ``end_ms``, the cursor moved past them; and the
    accept times of the first messages left (the heads)."""
    rows = Rows()
    heads: list[int] = []
    for seg in segments:
        store = _store(stores, seg)
        if seg.finished and seg.end_positions is not None:
            ends = dict(seg.end_positions)
        else:
            ends = await store.end_positions(seg.storage_topic)
        cursor = state.cursor.setdefault(str(seg.id), {})
        for p in range(seg.partitions):
            pos, head = await _read_partition(
                store, seg, p, state.position(seg, p), ends.get(p, 0), end_ms, rows
            )
            cursor[str(p)] = pos
            if head is not None:
                heads.append(head)
    return rows, heads


async def _read_partition(
    store: SegmentStore, seg: Segment, p: int, pos: int, end: int, end_ms: int, rows: Rows
) -> tuple[int, int | None]:
    while pos < end:
        batch = await store.read(
            seg.storage_topic, p, pos, max_records=_READ, timeout=_READ_TIMEOUT_S
        )
        if not batch:
            # A read that times out with messages left: they go to a later window.
            log.warning("archive: %s[%s] gave nothing at %s of %s", seg.storage_topic, p, pos, end)
            return pos, None
        for msg in batch:
            if msg.position >= end:
                return pos, None
            env = Envelope.of(msg.headers)
            at = produced_ms(msg, env)
            if at >= end_ms:
                return pos, at
            rows.add(seg.id, msg, env, at)
            pos = msg.position + 1
    return pos, None


async def _write(objects: ArchiveObjects, rows: Rows, start: int, end: int, now_ms: int) -> Window:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(rows.columns, schema=schema())
    key = window_key(start)
    with tempfile.TemporaryDirectory(prefix="httpbus-archive-") as tmp:
        path = Path(tmp) / "window.parquet"
        pq.write_table(table, path, compression="zstd")
        size = path.stat().st_size
        await objects.put_file(key, path)
    return Window(
        start_ms=start,
        end_ms=end,
        key=key,
        messages=len(rows),
        duplicates=rows.duplicates,
        bytes=size,
        archived_at_ms=now_ms,
    )


async def _expire(
    objects: ArchiveObjects, state: ArchiveState, spec: ArchiveSpec, now_ms: int
) -> list[Window]:
    """Delete the windows whose date is older than ``keep_days`` (file first, then entry)."""
    if spec.keep_days is None:
        return []
    cutoff = window_start(now_ms, DAY_MS) - spec.keep_days * DAY_MS
    old = [w for w in state.windows if w.start_ms < cutoff]
    for window in old:
        await objects.delete(window.key)
    if old:
        state.windows = [w for w in state.windows if w.start_ms >= cutoff]
        await save_state(objects, state)
    return old


def _store(stores: Mapping[str, SegmentStore], seg: Segment) -> SegmentStore:
    store = stores.get(seg.cluster)
    if store is None:
        raise StorageUnavailable(f"segment {seg.id} is on cluster {seg.cluster!r}: not here")
    return store


async def read_window(objects: ArchiveObjects, window: Window) -> list[dict[str, Any]]:
    """The rows of an archived window, as dicts of :data:`COLUMNS` (``produced_at`` in ms)."""
    import io

    import pyarrow.parquet as pq

    raw = await objects.get_bytes(window.key)
    if raw is None:
        raise StorageUnavailable(f"archive {objects.url}: {window.key} is missing")
    table = pq.read_table(io.BytesIO(raw))
    out: list[dict[str, Any]] = table.to_pylist()
    for row in out:
        row["produced_at"] = int(row["produced_at"].timestamp() * 1000)
    return out


def describe(state: ArchiveState) -> dict[str, Any]:
    """The listing of an archive, for the API (``archived_until``: every message accepted
    before it is in a window of the list, or expired from it)."""
    return {
        "archived_until": iso(state.next_ms) if state.next_ms is not None else None,
        "windows": [
            {
                "start": iso(w.start_ms),
                "end": iso(w.end_ms),
                "key": w.key,
                "messages": w.messages,
                "duplicates": w.duplicates,
                "bytes": w.bytes,
                "archived_at": iso(w.archived_at_ms),
            }
            for w in state.windows
        ],
    }

"""What a segment intake does for a verified migration
(control_plane.leaders.migration_starts): it holds what it read from an external segment
while a cutover seals it, and passes over the ids the other side delivered
(``Segment.skip_ids``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from core import envelope
from core.audit import AuditType
from core.filters import FilterOutcome
from core.model import Backend, Segment, SegmentState
from core.shards import WHOLE
from delivery_workers.intake import SegmentIntake
from segments.protocol import Stored

EXTERNAL = Segment(
    id=1, cluster="legacy", backend=Backend.KAFKA, storage_topic="orders", partitions=1
)


EVERYTHING = SimpleNamespace(
    reads_body=False, matches=lambda *a, **k: SimpleNamespace(outcome=FilterOutcome.MATCH)
)


class Catalog:
    """Answers ``get_segment`` with the records queued, then the last one again."""

    def __init__(self, *records: Segment) -> None:
        self.records = list(records)
        self.reads = 0

    async def get_segment(self, project: str, topic: str, segment_id: int) -> Segment:
        self.reads += 1
        return self.records.pop(0) if len(self.records) > 1 else self.records[0]


class Recorder:
    """The audit, the source and the admission of an intake, as lists."""

    def __init__(self) -> None:
        self.audited: list[tuple[AuditType, str]] = []
        self.done: list[int] = []
        self.admitted: list[int] = []

    def message(self, kind: AuditType, msg: Stored, segment: Any, **extra: object) -> None:
        self.audited.append((kind, str(extra.get("reason", ""))))

    async def admit(self, item: Any) -> None:
        self.admitted.append(item.msg.position)


def intake(segment: Segment, catalog: Catalog, seen: Recorder) -> SegmentIntake:
    sub = SimpleNamespace(topic_project="shop", topic="orders")
    topic = SimpleNamespace(project="shop", name="orders")
    progress = SimpleNamespace(wake=lambda: None)
    return SegmentIntake(
        cast(Any, sub),
        WHOLE,
        cast(Any, SimpleNamespace(catalog=catalog)),
        cast(Any, topic),
        segment,
        matcher=cast(Any, EVERYTHING),
        admission=cast(Any, seen),
        throttle=cast(Any, None),
        progress=cast(Any, progress),
        committer=cast(Any, None),
        audit=cast(Any, seen),
        stats=cast(Any, None),
        read_batch=10,
    )


def stored(position: int, mid: str) -> Stored:
    headers = ((envelope.MESSAGE_ID, mid.encode()),)
    return Stored(partition=0, position=position, timestamp_ms=0, value=b"", headers=headers)


async def test_an_unmarked_external_segment_is_read_on_at_once() -> None:
    catalog = Catalog(EXTERNAL)
    r = intake(EXTERNAL, catalog, Recorder())
    await asyncio.wait_for(r._refresh_external(), 1)
    assert catalog.reads == 1 and r._end(0) is None


async def test_records_read_while_the_seal_is_marked_wait_for_its_ends() -> None:
    marked = EXTERNAL.model_copy(update={"sealing": True})
    sealed = marked.model_copy(
        update={"state": SegmentState.SEALED, "end_positions": {0: 5}, "sealing": False}
    )
    catalog = Catalog(marked, marked, marked, sealed)
    r = intake(EXTERNAL, catalog, Recorder())
    await asyncio.wait_for(r._refresh_external(), 5)
    assert catalog.reads == 4 and r._end(0) == 5  # records at 5 and past: not delivered


async def test_ids_the_other_side_delivered_are_passed_over() -> None:
    shadow = EXTERNAL.model_copy(update={"id": 2, "skip_ids": ("a", "c")})
    seen = Recorder()
    r = intake(shadow, Catalog(shadow), seen)
    source = SimpleNamespace(done=lambda msg: seen.done.append(msg.position))
    for position, mid in enumerate(["a", "b", "c"]):
        await r._take_one(cast(Any, source), stored(position, mid), f"2:0:{position}")
    assert seen.done == [0, 2]
    assert [kind for kind, _ in seen.audited] == [AuditType.FILTERED] * 2
    assert "verified migration" in seen.audited[0][1]
    assert seen.admitted == [1]  # "b" goes on to be delivered

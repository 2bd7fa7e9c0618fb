"""The fence of an external segment (segments.external): the segment is marked ``sealing``
in its record before its ends are read, so a reader that saw no mark read only what lies
before them (delivery_workers.intake holds what it reads while the mark is up)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

from control_plane.leaders.cutover_actions import CutoverActions
from core.model import Backend, Segment, SegmentState
from segments.cutover.machine import Cutover, Phase
from segments.external import ExternalStore
from segments.protocol import Fence

NOW = datetime(2026, 11, 25, tzinfo=UTC)
EXTERNAL = Segment(
    id=1,
    cluster="legacy",
    backend=Backend.KAFKA,
    storage_topic="legacy.orders",
    partitions=1,
    state=SegmentState.ACTIVE,
)


class Steps:
    """The catalog and the inner Kafka store, writing what happens in order."""

    def __init__(self) -> None:
        self.done: list[str] = []
        self.segment = EXTERNAL

    async def get_topic(self, project: str, topic: str) -> Any:
        return SimpleNamespace(segment=lambda sid: self.segment if sid == 1 else None)

    async def update_segment(self, project: str, topic: str, segment: Segment) -> None:
        self.done.append(f"record sealing={segment.sealing}")
        self.segment = segment

    async def end_positions(self, name: str) -> dict[int, int]:
        self.done.append("ends read")
        return {0: 7}


def _cutover() -> Cutover:
    return Cutover(
        id="c1",
        project="shop",
        topic="orders",
        phase=Phase.COMMIT,
        from_segment=1,
        to_segment=2,
        cluster="kafka-main",
        partitions=1,
        storage_topic="shop.orders.s2",
        started_at=NOW,
        updated_at=NOW,
        phase_times={},
    )


async def test_an_external_segment_is_marked_sealing_before_its_ends_are_read() -> None:
    steps = Steps()
    external = ExternalStore(cast(Any, steps))
    actions = CutoverActions(
        cast(Any, steps), {"legacy": external}, cast(Any, None), lambda: NOW, {}
    )
    assert await actions.fence_old(_cutover()) == Fence({0: 7}, True)
    assert steps.done == ["record sealing=True", "ends read"]
    # A leader that re-runs the fence after a crash marks it once.
    await actions.fence_old(_cutover())
    assert steps.done == ["record sealing=True", "ends read", "ends read"]

"""The runner moves past a sealed segment whose positions are not dense (as on Pulsar, where
a position packs ledger, entry and batch index and the end is the next entry)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from segments.protocol import Produced, Record, SegmentStore, Stored
from segments.reader import SegmentReader
from tests.support.world import EndpointWorld as World
from tests.support.world import (
    deliver_across_a_seal,
    endpoint_world_fixture,  # noqa: F401  (the world fixture)
)

GAP = 10


def _up(position: int) -> int:
    return -(-position // GAP)  # the first inner position at or after an outer one


class Sparse:
    """A store whose positions are the inner ones times ten, its ends the next "entry"."""

    def __init__(self, inner: SegmentStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def produce(self, name: str, record: Record, *, partition: int | None = None) -> Produced:
        done = await self.inner.produce(name, record, partition=partition)
        return dataclasses.replace(done, position=done.position * GAP)

    async def produce_many(self, name: str, records: Sequence[Record]) -> list[Any]:
        raise NotImplementedError

    async def read(self, name: str, partition: int, start: int, **kw: Any) -> list[Stored]:
        got = await self.inner.read(name, partition, _up(start), **kw)
        return [dataclasses.replace(m, position=m.position * GAP) for m in got]

    async def end_positions(self, name: str) -> dict[int, int]:
        return {p: e * GAP for p, e in (await self.inner.end_positions(name)).items()}

    async def last_positions(self, name: str) -> dict[int, int]:
        return {p: last * GAP for p, last in (await self.inner.last_positions(name)).items()}

    async def seal(self, name: str, *, settle_s: float | None = None) -> dict[int, int]:
        return {p: e * GAP for p, e in (await self.inner.seal(name)).items()}

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        await self.inner.commit(name, group, {p: _up(pos) for p, pos in positions.items()})

    async def committed(self, name: str, group: str) -> dict[int, int]:
        return {p: c * GAP for p, c in (await self.inner.committed(name, group)).items()}


async def test_moves_past_a_sealed_segment_with_sparse_positions(world: World) -> None:
    sparse = Sparse(world.store)
    world = dataclasses.replace(
        world,
        reader=SegmentReader(world.catalog, {"embedded": sparse}),  # type: ignore[dict-item]
    )
    sent = await deliver_across_a_seal(world, sparse)  # type: ignore[arg-type]
    assert sorted(mid for _, mid, _ in world.endpoint.received) == sorted(sent)

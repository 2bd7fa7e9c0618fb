"""When the assignment leader acts on members joining (control_plane.leaders.join_settle)."""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path

from control_plane.leaders.assigner import WORKERS, Assigner
from control_plane.leaders.join_settle import JoinSettle
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from metastore.protocol import MetaStore
from tests.support.until import until
from tests.support.world import embedded_world, subscription


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def settle(clock: Clock) -> JoinSettle:
    return JoinSettle(quiet_s=1.0, most_s=10.0, clock=clock)


def test_nothing_seen_assigns_now() -> None:
    assert settle(Clock()).wait_s() == 0.0


def test_a_join_waits_until_quiet() -> None:
    clock = Clock()
    joins = settle(clock)
    joins.saw(joined=True, left=False)
    assert joins.wait_s() == 1.0
    clock.now += 0.6
    joins.saw(joined=True, left=False)  # another joins: the quiet starts over
    assert joins.wait_s() == 1.0
    clock.now += 1.0
    assert joins.wait_s() == 0.0


def test_joins_in_a_row_wait_at_most_most_s() -> None:
    clock = Clock()
    joins = settle(clock)
    for _ in range(30):  # one every 0.5 s for 15 s: never quiet
        joins.saw(joined=True, left=False)
        clock.now += 0.5
        if joins.wait_s() == 0.0:
            break
    assert clock.now - 100.0 == 10.0


def test_a_leave_assigns_at_once_even_among_joins() -> None:
    clock = Clock()
    joins = settle(clock)
    joins.saw(joined=True, left=False)
    joins.saw(joined=False, left=True)
    assert joins.wait_s() == 0.0


def test_assigning_starts_a_new_row() -> None:
    clock = Clock()
    joins = settle(clock)
    joins.saw(joined=False, left=True)
    joins.assigning()
    clock.now += 20.0
    joins.saw(joined=True, left=False)
    assert joins.wait_s() == 1.0  # the old leave and the old first join are forgotten
    joins.assigning()
    assert joins.wait_s() == 0.0


async def test_the_leader_assigns_members_joining_together_once(tmp_path: Path) -> None:
    """Three members join a moment apart under a running leader: none is ever given every
    subscription (the first would be, were each join assigned), and the plan is written
    once the joins went quiet."""
    quiet = 2.0
    async with embedded_world(tmp_path) as world:
        for i in range(12):
            await world.catalog.create_subscription(subscription(f"s{i}", "http://127.0.0.1:9/"))
        everything = {f"p/s{i}" for i in range(12)}
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(
                Assigner(world.meta, world.catalog, "cp-1", interval_s=0.5, join_quiet_s=quiet)
            )
            seen: list[set[str]] = []
            recorder = asyncio.create_task(_record(world.meta, "m1", seen))
            stack.callback(recorder.cancel)
            started = time.monotonic()
            for member in ("m1", "m2", "m3"):  # each within the quiet of the one before
                meta = await stack.enter_async_context(EmbeddedMetaStore(str(tmp_path / "meta.db")))
                await meta.join(WORKERS, member, b"{}")
                joined = time.monotonic()
                await asyncio.sleep(0.5)

            async def assigned() -> bool:
                nodes = [await world.meta.get(paths.assignment(m)) for m in ("m1", "m2", "m3")]
                keys = [k for n in nodes if n is not None for k in json.loads(n.data)]
                return sorted(keys) == sorted(everything)

            await until(assigned, 10, "every subscription assigned to the three")
            took, after_last = time.monotonic() - started, time.monotonic() - joined
            await until(lambda: bool(seen), 5, "m1's assignment seen")
        assert after_last >= quiet * 0.9, f"assigned {after_last:.2f} s after the last join"
        assert took < 10, f"assigned {took:.2f} s after the first join"
        assert all(keys != everything for keys in seen), seen


async def _record(meta: MetaStore, member: str, seen: list[set[str]]) -> None:
    async for node in meta.watch(paths.assignment(member)):
        if node is not None:
            seen.append(set(json.loads(node.data)))

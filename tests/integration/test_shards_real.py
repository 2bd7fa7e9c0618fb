"""One subscription of 4 shards over two worker processes, on real ZooKeeper and Kafka: both
workers deliver a share, a SIGKILLed worker's shards resume on the other, nothing is missing
and every group's messages first arrive in produce order."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest

from control_plane.leaders.assigner import Assigner
from control_plane.leaders.rendezvous import rendezvous
from core.shards import shards, unit_key
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world
from tests.support.world import record

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SHARDS = 4
GROUPS = 40
TOTAL = 2_000
SESSION_S = 4.0


def _members_sharing(unique: str) -> list[str]:
    """Two member names between which rendezvous hashing splits the shards (with random
    names all four land on one worker one time in eight)."""
    keys = [unit_key("shop", "big", shard) for shard in shards(SHARDS)]
    for attempt in range(100):
        names = [f"w{i}-{unique}-{attempt}" for i in (1, 2)]
        if all(rendezvous(keys, names).values()):
            return names
    raise AssertionError("no split found")


async def _holders(world: ProcessWorld) -> dict[int, str]:
    held = {k: await world.holder("big", k) for k in range(SHARDS)}
    return {k: m for k, m in held.items() if m is not None}


async def test_shards_spread_over_workers_and_survive_a_sigkill(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    sent: dict[str, list[str]] = {f"g{i}": [] for i in range(GROUPS)}
    async with process_world(
        real_services, unique, tmp_path, grouped=True, session_timeout_s=SESSION_S
    ) as world:
        await world.subscribe("big", path="all", max_in_flight=20, shards=SHARDS)
        members = _members_sharing(unique)
        workers = world.workers(members, commit_every_s=0.2, lock_retry_s=0.2)

        def distinct() -> int:
            return len(set(world.hook.delivered()))

        async with Assigner(world.meta, world.catalog, "cp-test", interval_s=0.5):
            await asyncio.gather(*(w.ready() for w in workers))

            async def planned() -> dict[int, str] | None:  # the plan once both have joined
                held = await _holders(world)
                return held if len(set(held.values())) == 2 and len(held) == SHARDS else None

            holders = await until(planned, 30, "the shards spread over both", interval=0.1)
            spread = {m: sorted(k for k, h in holders.items() if h == m) for m in holders.values()}
            victim = next(w for w in workers if w.member in holders.values())
            survivor = next(w for w in workers if w is not victim)

            async def produce() -> None:
                for start in range(0, TOTAL, 100):
                    records = []
                    for i in range(start, start + 100):
                        group, mid = f"g{i % GROUPS}", f"m{i}"
                        sent[group].append(mid)
                        records.append(record(mid, group))
                    await world.produce_many(records)
                    await asyncio.sleep(0.1)

            producing = asyncio.create_task(produce())
            await until(lambda: distinct() >= TOTAL // 4, 90, "a quarter delivered")
            victim.proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()

            async def all_on_survivor() -> bool:
                held = await _holders(world)
                return len(held) == SHARDS and set(held.values()) == {survivor.member}

            await until(all_on_survivor, SESSION_S * 5, "the survivor holding all", interval=0.05)
            takeover = time.monotonic() - killed_at
            await producing
            await until(lambda: distinct() >= TOTAL, 90, "every message", interval=0.1)
    got = [(d.group, d.id) for d in world.hook.got]
    ids = [m for _, m in got]
    missing = {m for ms in sent.values() for m in ms} - set(ids)
    out_of_order = []
    for group, expected in sent.items():
        first_seen = list(dict.fromkeys(m for g, m in got if g == group))
        if first_seen != expected:
            out_of_order.append(group)
    print(
        f"\nshards per worker before the kill: {spread}; killed {victim.member}; "
        f"takeover {takeover:.2f}s; delivered={len(ids)} duplicates={len(ids) - len(set(ids))} "
        f"missing={len(missing)} groups out of order={out_of_order}"
    )
    assert len(spread) == 2, f"one worker held every shard: {spread}"
    assert not missing
    assert not out_of_order

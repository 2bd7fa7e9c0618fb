"""Real network partitions (issue 34): a delivery worker in a network namespace of its own
(scripts/realservices/netns.py), cut off from ZooKeeper but not from Kafka or its endpoint,
while a second worker runs in the root namespace and a producer service publishes through
HTTP. The packets between the namespace and ZooKeeper's port are dropped both ways, or only
ZooKeeper's answers (``in``: the worker's pings still arrive, so the server keeps its session
until the client gives up the silent connection); nothing killed, nothing paused. 10 s later
the partition heals.

The cut-off worker must stop delivering before its session can have expired on the server,
the other worker takes the subscription over, and the checker (tests/chaos/checker.py)
finds no acknowledged message lost, no group out of order, no group delivered by both
workers at once, both workers and the producer still running, and publishing and delivery
back within 15 s of the heal, the cut-off worker ready again by then. On the single-node
servers of the suite; needs root."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from scripts.realservices.netns import Direction
from tests.chaos.checker import check, from_requests
from tests.chaos.conftest import CutOffWorld
from tests.chaos.faults import ADMIN, Load
from tests.support.hook import Request
from tests.support.machine import load_average
from tests.support.processes import ProducerProcess, ready_now
from tests.support.until import until
from tests.support.workers import ProcessWorld

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 4.0
OTHER_SESSION_S = 15.0  # the other worker's: it must not lapse under load (see the zombie test)
PARTITION_S = 10.0
AFTER_HEAL_S = 8.0
GROUPS = 8
BACK_WITHIN_S = 15.0


async def _holds(world: ProcessWorld, member: str) -> bool:
    return await world.holder("s0") == member


@pytest.mark.parametrize("direction", ["both", "in"])
async def test_a_worker_partitioned_from_zookeeper_hands_over_without_split_brain(
    direction: Direction, unique: str, tmp_path: Path, cut_off: CutOffWorld
) -> None:
    async with cut_off("cut", SESSION_S) as (ns, world, zk_port):
        world.hook.delay = lambda path: 0.005  # a receiver that takes a moment
        await world.subscribe("s0", max_in_flight=8)
        members = {"cut": f"wn-{unique}", "other": f"wr-{unique}"}
        for member in members.values():
            await world.assign(member, "s0")
        options = {"commit_every_s": 0.2, "lock_retry_s": 0.2}
        cut = world.worker(members["cut"], world.settings(**options), ns)
        await cut.ready()
        await until(lambda: _holds(world, members["cut"]), 30, "the namespaced worker holding s0")
        other_meta = world.metastore(session_timeout_s=OTHER_SESSION_S)
        [other] = world.workers([members["other"]], **options, metastore=other_meta)
        await other.ready()

        def sender(r: Request) -> str:
            return "cut" if r.host == ns.address else "other"

        with ProducerProcess(world.settings(admin_token=ADMIN), tmp_path) as producer:
            load = Load(producer.url)
            clients = [asyncio.create_task(load.group(f"g{i:02d}")) for i in range(GROUPS)]
            try:
                await until(lambda: len(world.hook.on("s0")) >= 100, 30, "deliveries flowing")
                ns.partition([zk_port], direction)
                fault_at = time.time()
                await until(lambda: _holds(world, members["other"]), SESSION_S * 5, "a takeover")
                took_over = time.time() - fault_at
                # The partition lasts a while after the takeover (a pace, not a synchronisation).
                await asyncio.sleep(max(0.0, fault_at + PARTITION_S - time.time()))
                ready_in_partition = await ready_now(cut.url)  # its metastore answers?
                ns.heal()
                heal_at = time.time()
                back = "the cut-off worker ready again"
                await until(lambda: ready_now(cut.url), BACK_WITHIN_S, back)
                rejoined = time.time() - heal_at
                # Publishing on after the heal (a pace, not a synchronisation).
                await asyncio.sleep(max(0.0, heal_at + AFTER_HEAL_S - time.time()))
            finally:
                load.stop.set()
                await asyncio.gather(*clients, return_exceptions=True)
            acked = {f"{g}-{s}" for g, seqs in load.acked.items() for s in seqs}
            await until(lambda: acked <= set(world.hook.ids("s0")), 60, "every acked delivered")
            aborted = [p.member for p in (cut, other) if p.proc.poll() is not None]
            aborted += ["producer"] if producer.proc and producer.proc.poll() is not None else []
        deliveries = from_requests(world.hook.on("s0"), sender)
    verdict = check(load.history(deliveries), heal_at=heal_at)
    by_cut = [d.start - fault_at for d in deliveries if d.sender == "cut"]
    last_cut = max((t for t in by_cut if t > 0), default=0.0)
    first_other = min((d.start - fault_at for d in deliveries if d.sender == "other"), default=-1)
    print(
        f"\npartitioned from ZooKeeper ({direction}) at 0 for {heal_at - fault_at:.1f}s: "
        f"the cut-off worker's last delivery {last_cut:.2f}s, the takeover {took_over:.2f}s, "
        f"the other's first delivery {first_other:.2f}s (session {SESSION_S}s); "
        f"its /readyz in the partition {'200' if ready_in_partition else 'not 200'}, "
        f"200 again {rejoined:.2f}s after the heal; {verdict.summary()}; "
        f"load average {load_average()}"
    )
    assert not aborted, f"processes exited: {aborted}"
    assert last_cut < SESSION_S, "the cut-off worker delivered after its session could expire"
    assert by_cut, "the namespaced worker never delivered: the test proves nothing"
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)

"""A producer partitioned from ZooKeeper during a cutover's PREPARE or SWITCH (issue 34):
two producer services publish to a grouped topic on Kafka, one of them in a network
namespace of its own (scripts/realservices/netns.py). The packets between it and ZooKeeper
are dropped both ways (Kafka stays reachable) just before a cutover to a new Kafka segment
starts, so the cut-off producer never sees PREPARE; or just after it acknowledged PREPARE,
so it never sees SWITCH. The coordinator goes on without it once its session expires, or
rolls back at a timeout; a cut-off producer either keeps writing the old segment from its
cache until the seal, the fence refusing every write after it with a 503 within its hold
bound (it cannot learn the new pointer while cut off), or refuses writes itself while a
cutover it took part in is pending. The partition heals 8 s after the cutover is over (the
producer holds a request 5 s at most).

The checker (tests/chaos/checker.py), over every segment read the way a worker reads them:
no acknowledged message lost, no group out of order, both producers still running, and the
cut-off producer answering 201 again within 15 s of the heal. Single-node servers; root."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from control_plane.leaders.cutover_coordinator import CutoverCoordinator
from control_plane.services.cutovers import Cutovers
from metastore.catalog import Catalog
from metastore.config import open_metastore
from segments.cutover.machine import Timeouts
from tests.chaos.checker import Delivery, check, longest_gap
from tests.chaos.conftest import CutOffWorld
from tests.chaos.faults import ADMIN, Load, merged
from tests.support.cutover import consume_all, timeline
from tests.support.leaders import leader_context
from tests.support.machine import load_average
from tests.support.processes import ProducerProcess, ready_now
from tests.support.until import until

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 4.0
GROUPS = 4  # per producer
TIMEOUTS = Timeouts(prepare_s=20.0, switch_s=4.0, complete_s=20.0)
DONE = {"COMPLETE", "ROLLED_BACK", "ABORTED"}
HELD_AFTER_S = 8.0  # past the producer's hold (cutover_hold_timeout_s 5 s)
AFTER_HEAL_S = 8.0
BACK_WITHIN_S = 15.0


@pytest.mark.parametrize("during", ["PREPARE", "SWITCH"])
async def test_a_producer_partitioned_from_zookeeper_during_a_cutover_loses_nothing(
    during: str, unique: str, tmp_path: Path, cut_off: CutOffWorld
) -> None:
    async with cut_off("producer", SESSION_S) as (ns, world, zk_port):
        await world.subscribe("audit")  # read by consume_all, not by a worker
        base = world.settings(admin_token=ADMIN, cutover_hold_timeout_s=5.0)
        cut = ProducerProcess(
            {**base, "member_id": f"pn-{unique}"}, tmp_path, ns.exec_argv, ns.address
        )
        other = ProducerProcess({**base, "member_id": f"pr-{unique}"}, tmp_path)
        clusters: dict[str, Any] = {"kafka-main": world.kafka}
        try:
            cut.start(timeout=60)
            other.start(timeout=60)
            loads = [Load(cut.url), Load(other.url)]
            clients = [
                asyncio.create_task(load.group(f"{tag}{i}"))
                for load, tag in zip(loads, ("n", "r"), strict=True)
                for i in range(GROUPS)
            ]
            async with open_metastore(world.zk) as cmeta:
                cutovers = Cutovers(cmeta, Catalog(cmeta), clusters, TIMEOUTS, f"chaos{unique}")
                context = leader_context(cmeta, {"kafka-main": world.store}, "cp-chaos", cutovers)
                async with CutoverCoordinator(context):
                    try:
                        await until(
                            lambda: all(sum(map(len, ld.acked.values())) >= 50 for ld in loads),
                            30,
                            "both producers publishing",
                        )
                        if during == "PREPARE":  # before it hears of the cutover
                            ns.partition([zk_port])
                            fault_at = time.time()
                            await cutovers.start("shop", "orders", "kafka-main", 2)
                        else:  # once it acknowledged PREPARE, before it hears of SWITCH
                            await cutovers.start("shop", "orders", "kafka-main", 2)
                            await _once_prepared(cutovers, f"pn-{unique}")
                            ns.partition([zk_port])
                            fault_at = time.time()
                            acks = (await cutovers.get("shop", "orders")).producers
                            mine = acks.get(f"pn-{unique}")
                            assert mine is None or mine.switched_at is None, (
                                "the partition came after its SWITCH acknowledgement: the "
                                "test's premise failed (a coordinator round is 0.2 s)"
                            )
                        doc = await until(lambda: _done(cutovers), 90, "the cutover over")
                        over_at = time.time()
                        # Still cut off a while after: the fence holds (a pace, not a sync).
                        await asyncio.sleep(HELD_AFTER_S)
                        ns.heal()
                        heal_at = time.time()
                        await until(lambda: ready_now(cut.url), BACK_WITHIN_S, "the producer ready")
                        ready_after = time.time() - heal_at
                        await asyncio.sleep(AFTER_HEAL_S)  # publishing on (a pace)
                    finally:
                        for load in loads:
                            load.stop.set()
                        await asyncio.gather(*clients, return_exceptions=True)
            aborted = [p.url for p in (cut, other) if p.proc is None or p.proc.poll() is not None]
        finally:
            cut.stop()
            other.stop()
        sub = await world.catalog.get_subscription("shop", "audit")
        stored = await consume_all(world.catalog, {"kafka-main": world.store}, sub)
        topic = await world.catalog.get_topic("shop", "orders")
        for seg in topic.segments[1:]:
            with contextlib.suppress(Exception):
                await world.store.delete_topic(seg.storage_topic)
    deliveries = [Delivery(f"{g}-{s}", g, "reader", 0) for g, seqs in stored.items() for s in seqs]
    verdict = check(merged(loads, deliveries), heal_at=heal_at)
    mine = [d for d in deliveries if d.group.startswith("n")]
    own = check(loads[0].history(mine), heal_at=heal_at)
    spans = {"cutover": (fault_at, over_at), "after it": (over_at, heal_at)}
    answered = {
        what: dict(Counter(s for t, s in loads[0].answers if a <= t < b))
        for what, (a, b) in spans.items()
    }
    stalled = longest_gap([t for t, s in loads[0].answers if s == 201], fault_at)
    print(
        f"\n{timeline(doc)}\nthe cut-off producer's answers while partitioned: {answered}; "
        f"its longest time without a 201 from the cut {stalled:.2f}s\n"
        f"cut off from ZooKeeper during {during} at 0: cutover {doc['phase']} at "
        f"{over_at - fault_at:.2f}s, healed at {heal_at - fault_at:.2f}s, the cut-off "
        f"producer ready {ready_after:.2f}s after; its publishes: {own.summary()}\nall: "
        f"{verdict.summary()}; load average {load_average()}"
    )
    assert not aborted, f"processes exited: {aborted}"
    assert doc["phase"] in ("COMPLETE", "ROLLED_BACK"), doc
    # Its clients are answered while it is cut off: a refused write is a 503 within the
    # hold bound (5 s), not a request held for as long as the partition.
    if doc["phase"] == "COMPLETE":  # the old segment sealed under it
        assert answered["after it"].get(503), f"no answer while partitioned: {answered}"
    verdict.assert_sound(back_within_s=None)  # 0 loss, 0 inversions over every segment
    own.assert_sound(back_within_s=BACK_WITHIN_S)  # and the cut-off producer back in 15 s


async def _done(cutovers: Cutovers) -> dict[str, Any] | None:
    doc = (await cutovers.get("shop", "orders")).public()
    return dict(doc) if doc.get("phase") in DONE else None


async def _once_prepared(cutovers: Cutovers, member: str) -> None:
    """Return as soon as ``member`` has acknowledged PREPARE (a watch, not a poll)."""
    async with asyncio.timeout(30):
        async for current in cutovers.records.watch("shop", "orders"):
            acks = None if current is None else current.producers.get(member)
            if acks is not None and acks.prepared_at is not None:
                return

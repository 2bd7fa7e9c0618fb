"""ZooKeeper's quorum lost for 20 s while a producer service publishes and a worker process
delivers (issue 34's matrix), on the three-peer ensemble: two peers SIGKILLed at once, the
third left alone without a quorum, both restarted on their data 20 s later.

The worker cannot confirm its session meanwhile, so it must send nothing once its lease has
lapsed (metastore/lease.py), and deliver again once the ensemble is back. Every acknowledged
message is stored and delivered, each group's first deliveries in the order they were
acknowledged; publishing and delivery are back within 15 s of the quorum."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.conftest import Cluster
from tests.chaos.delivering import delivering
from tests.chaos.faults import Load, kill_for
from tests.support.workers import ProcessWorld

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SESSION_S = 6.0
DOWN_S = 20.0
BACK_WITHIN_S = 15.0


async def test_zookeeper_quorum_lost_for_20s_fences_delivery_and_loses_nothing(
    cluster: Cluster, unique: str, tmp_path: Path
) -> None:
    async with delivering(cluster, unique, tmp_path, SESSION_S) as run:
        modes = cluster.zookeeper_modes()
        lost = [f"zookeeper-{n}" for n in sorted(modes)[:2]]
        fault_at = time.time()
        restarted_at = await kill_for(cluster, lost, DOWN_S)
        back_at = time.time()
        await asyncio.sleep(BACK_WITHIN_S)  # publishing on after the quorum is back
        try:
            verdict = await run.settle(heal_at=back_at)
        finally:
            _report(run.world, run.load, (modes, lost), (fault_at, restarted_at, back_at))
        delivered = run.world.hook.on("s0")
    print(verdict.summary())
    # 0 loss, 0 inversions, publishing and delivery back within 15 s of the quorum.
    verdict.assert_sound(back_within_s=BACK_WITHIN_S)
    # From the lease's span (and a request in flight) to the restart of the two peers.
    fenced = (fault_at + SESSION_S / 2 + 1.0, restarted_at)
    during = [round(r.at - fault_at, 2) for r in delivered if fenced[0] < r.at < fenced[1]]
    assert not during, f"{len(during)} deliveries without a quorum, at (s after the fault) {during}"


def _report(
    world: ProcessWorld,
    load: Load,
    peers: tuple[dict[int, str], list[str]],
    times: tuple[float, float, float],
) -> None:
    """What the run did, in seconds from the fault (the figures of docs/reliability.md)."""
    (modes, lost), (fault_at, restarted_at, back_at) = peers, times
    delivered = world.hook.on("s0")
    last_before = max((r.at for r in delivered if r.at < restarted_at), default=fault_at)
    first_after = min((r.at for r in delivered if r.at >= restarted_at), default=float("nan"))
    during = Counter(s for t, s in load.answers if fault_at <= t < back_at)
    print(
        f"\nquorum lost ({lost} of {modes}), restarted after {restarted_at - fault_at:.1f}s, "
        f"serving again at {back_at - fault_at:.1f}s: publish answers meanwhile "
        f"{dict(during)}; the worker's last delivery at {last_before - fault_at:.2f}s, its "
        f"first after the restart {first_after - restarted_at:.2f}s after it; "
        f"{sum(len(s) for s in load.acked.values())} acknowledged, {len(delivered)} "
        f"deliveries"
    )

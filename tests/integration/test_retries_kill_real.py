"""SIGKILL a worker process while thousands of messages sit in the delay levels: after
another worker takes over, every message is delivered or dead-lettered, none lost.

Two worker processes on real ZooKeeper + Kafka (and + Pulsar), an Assigner in the test
process. Every message fails its first attempt: one in ten with 400 (to the DLQ), the rest
with 503 (to the 5 s delay level). The worker that holds the subscription is killed once most
messages have had their first attempt. ``HTTPBUS_KILL_MESSAGES`` sets the count (default
10 000).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

from control_plane.leaders.assigner import Assigner
from core.envelope import header
from core.model import RetryPolicy, Subscription
from metastore import paths
from metastore.protocol import MetaStore
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from tests.support.processes import WorkerProcess
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.world import BACKENDS, World, real_world, record, subscribe

pytestmark = pytest.mark.parametrize("kind", BACKENDS)
TOTAL = int(os.environ.get("HTTPBUS_KILL_MESSAGES", "10000"))
POLICY = RetryPolicy(
    max_attempts=5,
    backoff="fixed",
    initial_delay_ms=5_000,
    jitter=0,
    delay_levels_ms=(1_000, 5_000),
)


async def test_sigkill_with_messages_in_the_delay_levels(
    kind: str, real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with real_world(kind, real_services, unique, partitions=4, grouped=False) as world:
        world.hook.behaviour = lambda mid, n: (
            (400 if mid.endswith("0") else 503, {}) if n == 1 else (204, {})
        )
        sub = await subscribe(world, retry=POLICY, max_in_flight=200)
        settings = {
            "metastore": world.zk.model_dump(),
            "clusters": {world.cluster: world.config.model_dump()},
            "commit_every_s": 0.2,
            "lock_retry_s": 0.2,
        }
        workers = [WorkerProcess(settings, tmp_path, f"w{i}-{unique}") for i in (1, 2)]
        ids = [f"k{i}" for i in range(TOTAL)]
        try:
            async with Assigner(world.meta, world.catalog, "cp-test", interval_s=0.5):
                await asyncio.gather(*(w.ready() for w in workers))
                for start in range(0, TOTAL, 500):
                    batch = [record(m, None) for m in ids[start : start + 500]]
                    results = await world.store.produce_many(world.storage, batch)
                    assert not [r for r in results if isinstance(r, Exception)]
                await until(lambda: len(world.hook.tries) >= TOTAL * 0.9, 120, "90 % tried")
                holders = await _holders_of(world.meta)
                victim = next(w for w in workers if w.member == holders)
                survivor = next(w for w in workers if w is not victim)
                first_tried = len(world.hook.tries)
                delivered_before = len(world.hook.got)
                victim.proc.send_signal(signal.SIGKILL)
                killed = time.monotonic()

                async def taken_over() -> bool:
                    return await _holders_of(world.meta) == survivor.member

                await until(taken_over, 60, "the survivor holding the lock", interval=0.1)
                takeover = time.monotonic() - killed
                dead: set[str] = set()

                async def settled() -> bool:
                    nonlocal dead
                    dead = await _dead_ids(world, sub)
                    return len(set(world.hook.delivered()) | dead) >= TOTAL

                await until(settled, 180, "every message delivered or dead", interval=2)
                finished = time.monotonic() - killed
        finally:
            for w in workers:
                w.stop()
    delivered = set(world.hook.delivered())
    duplicates = len(world.hook.got) - len(delivered)
    missing = set(ids) - delivered - dead
    print(
        f"\n[{kind}] {TOTAL} messages; killed {victim.member} after {first_tried} first "
        f"attempts ({delivered_before} delivered, the rest in the 5 s level or the DLQ); "
        f"takeover {takeover:.1f} s, all settled {finished:.1f} s after the kill: "
        f"delivered={len(delivered)} dead_lettered={len(dead)} duplicates={duplicates} "
        f"missing={len(missing)}"
    )
    assert not missing
    # Only the 400s are dead-lettered; a 400 whose hand-off was not committed before the kill
    # is attempted again after the takeover, and this endpoint accepts second attempts.
    assert dead <= {m for m in ids if m.endswith("0")}
    assert {m for m in ids if not m.endswith("0")} <= delivered


async def _holders_of(meta: MetaStore) -> str | None:
    """The member holding the subscription's lock."""
    node = await meta.get(paths.subscription_lock("p", "s"))
    return None if node is None else str(json.loads(node.data)["member"])


async def _dead_ids(world: World, sub: Subscription) -> set[str]:
    layout = await load_layout(world.meta, sub)
    if layout is None:
        return set()
    view = await dlq.scan(world.store, layout)
    return {header(m.headers, "x-message-id") or "?" for m in view.live()}

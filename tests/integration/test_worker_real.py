"""Two worker processes on real ZooKeeper and Kafka, an Assigner in the test process: one
worker is SIGKILLed mid-load and its subscriptions resume on the other from the committed
positions, once ZooKeeper expires the dead worker's session (short here: 4 s)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from control_plane.leaders.assigner import Assigner
from segments.protocol import Record
from tests.support.processes import WorkerProcess
from tests.support.services import RealServices
from tests.support.until import until
from tests.support.workers import ProcessWorld, process_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]
SUBS = ["s0", "s1", "s2", "s3"]
TOTAL = 2_000
SESSION_S = 4.0


async def _diagnosis(workers: list[WorkerProcess], world: ProcessWorld) -> str:
    """What a stalled run looked like: locks, deliveries, each worker's metrics and log."""
    lines = [
        f"holders: {await world.held(SUBS)}",
        f"delivered: { {s: len(world.hook.ids(s)) for s in SUBS} }",
    ]
    async with httpx.AsyncClient() as client:
        for w in workers:
            try:
                text = (await client.get(f"http://127.0.0.1:{w.port}/metrics", timeout=2)).text
            except httpx.HTTPError as exc:
                text = f"(no metrics: {exc})"
            metrics = [m for m in text.splitlines() if m.startswith("httpbus_")]
            lines += [
                f"--- {w.member} metrics",
                *metrics[:40],
                f"--- {w.member} log",
                w.log.read_text()[-3000:],
            ]
    return "\n".join(lines)


def _id(mid: str) -> tuple[tuple[str, bytes], ...]:
    return (("x-message-id", mid.encode()),)


async def test_sigkilled_worker_hands_over_and_nothing_is_lost(
    real_services: RealServices, unique: str, tmp_path: Path
) -> None:
    async with process_world(real_services, unique, tmp_path, session_timeout_s=SESSION_S) as world:
        for s in SUBS:
            await world.subscribe(s, max_in_flight=20)
        members = [f"w{i}-{unique}" for i in (1, 2)]
        workers = world.workers(members, commit_every_s=0.2, lock_retry_s=0.2)

        def distinct(sub: str) -> int:
            return len(set(world.hook.ids(sub)))

        async with Assigner(world.meta, world.catalog, "cp-test", interval_s=0.5):
            await asyncio.gather(*(w.ready() for w in workers))

            holders = await world.all_held(SUBS)
            victim = next(w for w in workers if w.member in holders.values())
            survivor = next(w for w in workers if w is not victim)
            moved = [s for s, m in holders.items() if m == victim.member]
            ids = [f"m{i}" for i in range(TOTAL)]

            async def produce() -> None:
                for start in range(0, TOTAL, 100):
                    batch = ids[start : start + 100]
                    await world.produce_many(
                        [Record(m.encode(), key=m.encode(), headers=_id(m)) for m in batch]
                    )
                    await asyncio.sleep(0.1)

            producing = asyncio.create_task(produce())
            try:
                await until(lambda: min(distinct(s) for s in moved) >= TOTAL // 4, 90)
            except AssertionError:
                raise AssertionError(await _diagnosis(workers, world)) from None
            victim.proc.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            before = {s: distinct(s) for s in moved}

            async def all_on_survivor() -> bool:
                held = await world.held(SUBS)
                return len(held) == len(SUBS) and set(held.values()) == {survivor.member}

            await until(all_on_survivor, SESSION_S * 5, "the survivor holding all", interval=0.05)
            takeover = time.monotonic() - killed_at
            await producing
            await until(lambda: all(distinct(s) >= TOTAL for s in SUBS), 60, "every message")
    got = {s: world.hook.ids(s) for s in SUBS}
    delivered = sum(len(v) for v in got.values())
    duplicates = delivered - sum(len(set(v)) for v in got.values())
    missing = sum(len(set(ids) - set(got.get(s, []))) for s in SUBS)
    print(
        f"\nkilled {victim.member} holding {moved} at {before} delivered; "
        f"takeover {takeover:.2f}s (session timeout {SESSION_S}s); "
        f"delivered={delivered} duplicates={duplicates} missing={missing}"
    )
    assert missing == 0
    assert takeover < SESSION_S * 3

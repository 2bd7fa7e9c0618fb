"""Assignment of subscriptions to workers on the embedded backends: one metastore file, an
Assigner and two Workers each on its own store (its own session), a real local endpoint."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest

from control_plane.leaders.rendezvous import rendezvous
from core.errors import MetaStoreUnavailable
from delivery_workers.unit_lock import UnitLock
from metastore import paths
from segments.protocol import Record
from segments.subscription.layout import load_layout
from tests.support.load import Producing
from tests.support.until import until
from tests.support.workers import (
    WorkersWorld as World,
)
from tests.support.workers import (
    workers_world_fixture,  # noqa: F401  (the world fixture)
)

SUBS = [f"s{i}" for i in range(6)]


def test_rendezvous_moves_only_what_the_leaver_held() -> None:
    keys = [f"p/s{i}" for i in range(200)]
    three = rendezvous(keys, ["a", "b", "c"])
    two = rendezvous(keys, ["a", "b"])
    assert sorted(k for ks in three.values() for k in ks) == sorted(keys)
    assert set(three["a"]) <= set(two["a"]) and set(three["b"]) <= set(two["b"])
    assert all(len(ks) > 40 for ks in three.values())  # spread, not piled on one worker
    assert rendezvous(keys, []) == {}


async def test_spread_failover_and_never_two_owners(world: World) -> None:
    for name in SUBS:
        await world.subscribe(name)
    w1, w2 = await world.worker("w1"), await world.worker("w2")
    everything = {f"p/{s}" for s in SUBS}
    await until(lambda: set(w1.runners) | set(w2.runners) == everything)
    assert w1.runners and w2.runners and not set(w1.runners) & set(w2.runners)
    locks = await world.catalog.store.children(paths.SUBSCRIPTION_LOCKS)
    assert sorted(locks) == sorted(f"p:{s}" for s in SUBS)
    for key in everything:
        node = await world.catalog.store.get(paths.subscription_lock(*key.split("/")))
        assert node is not None
        assert json.loads(node.data)["member"] == ("w1" if key in w1.runners else "w2")

    overlaps: list[set[str]] = []

    async def watch_overlap() -> None:
        while True:
            if both := set(w1.runners) & set(w2.runners):
                overlaps.append(both)
            await asyncio.sleep(0.01)

    checker = asyncio.create_task(watch_overlap())
    first = await world.produce("a", 40)
    await until(lambda: all(set(world.hook.ids(s)) >= set(first) for s in SUBS))
    moved = set(w1.runners)
    started = time.monotonic()
    await world.stop(w1)
    await until(lambda: set(w2.runners) == everything, timeout=10)
    takeover = time.monotonic() - started
    print(f"takeover of {len(moved)} subscriptions in {takeover:.2f}s")
    second = await world.produce("b", 40)
    await until(lambda: all(set(world.hook.ids(s)) >= set(first + second) for s in SUBS))
    checker.cancel()
    assert takeover < 5
    assert overlaps == []
    holders = {
        json.loads(node.data)["member"]
        for s in SUBS
        if (node := await world.catalog.store.get(paths.subscription_lock("p", s)))
    }
    assert holders == {"w2"}


async def test_pause_stops_deliveries_and_resume_skips_nothing(world: World) -> None:
    await world.subscribe("s0")
    worker = await world.worker("w1")
    await until(lambda: "p/s0" in worker.runners)

    async def one(i: int) -> str:
        [mid] = await world.produce(f"m{i}", 1)
        return mid

    load = Producing(one)
    await until(lambda: len(world.hook.ids("s0")) >= 20)
    sub = await world.catalog.get_subscription("p", "s0")
    await world.catalog.update_subscription(sub.model_copy(update={"paused": True}))
    paused_at = time.time()
    await asyncio.sleep(2.0)  # proves that nothing is delivered while paused
    last = max(r.at for r in world.hook.on("s0"))
    assert last - paused_at < 1.0, f"delivered {last - paused_at:.2f}s after the pause"
    assert "p/s0" not in worker.runners
    produced = await load.stop()
    sub = await world.catalog.get_subscription("p", "s0")
    await world.catalog.update_subscription(sub.model_copy(update={"paused": False}))
    await until(lambda: set(world.hook.ids("s0")) >= set(produced))
    assert len(set(world.hook.ids("s0"))) == len(produced)


async def test_deleting_a_subscription_deletes_its_internal_topics(world: World) -> None:
    await world.subscribe("s0")
    worker = await world.worker("w1")
    await until(lambda: "p/s0" in worker.runners)
    due = str(int(time.time() * 1000) + 60_000).encode()
    headers = (("x-message-id", b"later"), ("x-deliver-at", due))
    await world.store.produce("st.1", Record(b"x", key=None, headers=headers))
    sub = await world.catalog.get_subscription("p", "s0")
    layout = await until(lambda: load_layout(world.catalog.store, sub), 10, "the layout")
    assert await world.store.partitions(layout.level(30_000)) == 1
    await world.catalog.delete_subscription("p", "s0")

    async def gone() -> bool:
        return await world.catalog.store.get(paths.internal_topics("p", "s0")) is None

    await until(gone, 10, "the internal topics' node deleted")
    for name in layout.topics():
        assert await world.store.partitions(name) is None, name


@pytest.mark.parametrize("answered", [True, False], ids=["landed", "landed-unanswered"])
async def test_a_lock_created_after_its_owner_was_unassigned_is_released(
    world: World, answered: bool
) -> None:
    """Unassigned while the lock's create is on the wire: the create lands anyway (and is
    answered, or times out though it landed), and the worker deletes it, or the next owner
    would wait for it as long as this worker lives."""
    worker = await world.worker("w1")
    meta = worker.metastore
    real_create = meta.create

    async def slow_create(path: str, data: bytes, **kw: Any) -> Any:
        landed = await real_create(path, data, **kw)
        await asyncio.sleep(0.3)
        if not answered:
            raise MetaStoreUnavailable(f"zookeeper did not answer on {path} in 10.0s")
        return landed

    lock = paths.subscription_lock("p", f"orphan-{answered}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(meta, "create", slow_create)
        acquiring = asyncio.create_task(UnitLock(meta, "w1", lock, worker._orphans, 0.05).acquire())
        await asyncio.sleep(0.1)
        acquiring.cancel()
        with pytest.raises(asyncio.CancelledError):
            await acquiring
        assert await meta.get(lock) is not None  # the create landed after the cancel
        await until(lambda: _absent(meta, lock), 5, "the orphan lock released")


async def _absent(meta: Any, path: str) -> bool:
    return await meta.get(path) is None


async def test_a_fenced_worker_keeps_its_lock_when_its_session_is_confirmed_again(
    world: World,
) -> None:
    """A lapsed lease (a stalled loop, a short partition) stops the runner, but while the
    same session lives the lock stays the worker's: no delete and retake of every lock
    (that fed the stall of a loaded worker with 10^3 subscriptions, bench/scale.py)."""
    await world.subscribe("s0")
    worker = await world.worker("w1")
    await until(lambda: "p/s0" in worker.runners)
    path = paths.subscription_lock("p", "s0")
    held = await world.catalog.store.get(path)
    assert held is not None
    before = worker.runners["p/s0"]
    first = await world.produce("a", 10)
    await until(lambda: set(world.hook.ids("s0")) >= set(first))
    worker.metastore.lease.suspend()  # the store's next heartbeat confirms it again
    await until(lambda: worker.runners.get("p/s0") not in (None, before), 10, "a new runner")
    after = await world.catalog.store.get(path)
    assert after == held  # the same node: same token, same version
    second = await world.produce("b", 10)
    await until(lambda: set(world.hook.ids("s0")) >= set(first + second))


async def test_a_waiting_lock_watches_instead_of_polling(world: World) -> None:
    """While another holds the lock the waiter makes no request: it polled before (a create
    and a read every ``retry_s``), two requests a unit twice a second for every unit whose
    previous owner had not let go, most of a member's requests at a rebalance of 10^3
    units (bench/scale.py). It takes the lock as soon as the holder lets go."""
    worker = await world.worker("w1")
    meta = worker.metastore
    lock = paths.subscription_lock("p", "waited")
    await meta.create(lock, json.dumps({"member": "w2", "token": "t"}).encode(), ephemeral=True)
    creates: list[str] = []
    real_create = meta.create

    async def counted(path: str, data: bytes, **kw: Any) -> Any:
        creates.append(path)
        return await real_create(path, data, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(meta, "create", counted)
        waiter = UnitLock(meta, "w1", lock, worker._orphans, 0.02)
        acquiring = asyncio.create_task(waiter.acquire())
        await asyncio.sleep(0.5)  # proves that nothing is asked while it is held
        assert creates == [lock] and not acquiring.done()
        await meta.delete(lock)
        async with asyncio.timeout(5):
            await acquiring
        node = await meta.get(lock)
        assert node is not None and node.data == waiter.token


async def test_a_lock_whose_create_timed_out_but_landed_is_released(world: World) -> None:
    """A create that got no answer in time may have landed: if its unit is unassigned
    before the next try, nobody cleared the lock and the next owner waited for it as long
    as this worker lived (hundreds of units at 10^4 on bench/scale.py)."""
    worker = await world.worker("w1")
    meta = worker.metastore
    real_create = meta.create

    async def lands_unanswered(path: str, data: bytes, **kw: Any) -> Any:
        await real_create(path, data, **kw)
        raise MetaStoreUnavailable(f"zookeeper did not answer on {path} in 10.0s")

    lock = paths.subscription_lock("p", "unanswered")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(meta, "create", lands_unanswered)
        with pytest.raises(MetaStoreUnavailable):
            await UnitLock(meta, "w1", lock, worker._orphans, 0.05).acquire()
    await until(lambda: _absent(meta, lock), 5, "the unanswered lock released")

"""Shards of one subscription spread over workers, on the embedded backends: the ownership
rule, the assigner's units, delivery by two workers, and the segment barrier."""

from __future__ import annotations

import asyncio
import secrets
from collections import defaultdict

import pytest

from circuit_breaker import CircuitState, Transition
from control_plane.leaders.rendezvous import rendezvous
from core.audit import AuditType
from core.model import SegmentState, Subscription
from core.shards import WHOLE, Shard, parse_unit_key, shards, unit_key
from delivery_workers.stats import RunnerStats
from delivery_workers.throttle import Throttle
from metastore import paths
from segments.protocol import Record, partition_for
from segments.reader import SegmentReader, commit_group
from tests.support.memory_audit import MemoryAudit
from tests.support.until import until as _until
from tests.support.workers import WorkersWorld as World
from tests.support.workers import workers_world_fixture  # noqa: F401  (the world fixture)
from tests.support.world import runner_segment, subscription


def test_every_message_has_exactly_one_owner() -> None:
    for count in (1, 2, 3, 4, 7):
        every = shards(count)
        for partition in range(12):
            for group in (None, "g-1", "order-42", b"\xff\x00raw"):
                owners = [s.index for s in every if s.owns(group, partition)]
                assert len(owners) == 1, (count, partition, group, owners)


def test_a_shard_reads_only_its_partitions_when_the_count_divides_them() -> None:
    assert [p for p in range(8) if Shard(1, 4).reads(p, 8)] == [1, 5]
    assert [p for p in range(6) if Shard(1, 4).reads(p, 6)] == list(range(6))  # 4 ∤ 6
    assert all(WHOLE.reads(p, 5) for p in range(5))
    # What makes skipping sound: a group's partition says which shard owns it.
    for i in range(500):
        group = f"group-{i}-{secrets.token_hex(3)}".encode()
        partition = partition_for(group, 8)
        [owner] = [s for s in shards(4) if s.owns(group, partition)]
        assert owner.reads(partition, 8)


def test_names_of_a_shard_and_of_the_whole() -> None:
    assert unit_key("p", "s", WHOLE) == "p/s" and unit_key("p", "s", Shard(2, 3)) == "p/s#2"
    assert parse_unit_key("p/s") == ("p", "s", None)
    assert parse_unit_key("p/s#2") == ("p", "s", 2)
    assert paths.unit_lock("p/s#2") == paths.subscription_lock("p", "s") + "#2"
    assert paths.unit_status("p/s") == paths.subscription_status("p", "s")
    sub = _sub("s", shards=3)
    assert commit_group(sub) == commit_group(sub, WHOLE) == "httpbus.p.s"
    assert commit_group(sub, Shard(1, 3)) == "httpbus.p.s.shard1"
    with pytest.raises(ValueError, match="does not exist"):
        Shard(3, 3)
    with pytest.raises(ValueError, match="bad shard"):
        parse_unit_key("p/s#x")


async def test_each_shard_names_itself_in_its_pause_and_circuit_events(world: World) -> None:
    """The reconciliation stops a shard's clock on that shard's events only, so a shard's
    runner labels its ``paused``/``resumed`` and ``circuit`` events ``k/N``."""
    audit = MemoryAudit([AuditType.PAUSED, AuditType.RESUMED, AuditType.CIRCUIT])
    sub = await world.catalog.create_subscription(_sub("big", shards=2))
    worker = await world.worker("w1", audit)
    await _until(lambda: set(worker.runners) == {"p/big#0", "p/big#1"})
    await world.catalog.update_subscription(sub.model_copy(update={"paused": True}))
    await _until(lambda: len(audit.events) == 2, what="a paused event per shard")
    assert sorted((e.type, e.shard) for e in audit.events) == [
        (AuditType.PAUSED, "0/2"),
        (AuditType.PAUSED, "1/2"),
    ]
    throttle = Throttle.for_subscription(sub, RunnerStats(), audit, Shard(1, 2))
    throttle.on_transition(Transition(0.0, CircuitState.CLOSED, CircuitState.OPEN, "test", 0.9))
    assert (audit.events[-1].type, audit.events[-1].shard) == (AuditType.CIRCUIT, "1/2")
    whole = Throttle.for_subscription(_sub("one"), RunnerStats(), audit)
    whole.on_transition(Transition(0.0, CircuitState.CLOSED, CircuitState.OPEN, "test", 0.9))
    assert audit.events[-1].shard is None and WHOLE.label is None


def test_rendezvous_spreads_the_shards_of_one_subscription() -> None:
    keys = [unit_key("p", "big", s) for s in shards(16)]
    plan = rendezvous(keys, ["w1", "w2", "w3"])
    assert sorted(k for ks in plan.values() for k in ks) == sorted(keys)
    assert sorted(len(ks) for ks in plan.values()) == [5, 5, 6]


def test_shards_never_share_a_worker_while_one_is_idle() -> None:
    for name in (f"sub{i}" for i in range(50)):
        keys = [unit_key("p", name, s) for s in shards(2)]
        plan = rendezvous(keys, ["w1", "w2"])
        assert sorted(len(ks) for ks in plan.values()) == [1, 1], (name, plan)


def _sub(name: str, *, shards: int = 1, url: str = "http://127.0.0.1:9/x") -> Subscription:
    return subscription(name, url, shards=shards)


async def test_two_workers_share_a_sharded_subscription(world: World) -> None:
    await world.catalog.create_subscription(_sub("big", shards=4, url=world.hook.url_for("big")))
    w1, w2 = await world.worker("w1"), await world.worker("w2")
    units = {f"p/big#{k}" for k in range(4)}
    await _until(lambda: set(w1.runners) | set(w2.runners) == units)
    assert not set(w1.runners) & set(w2.runners)
    sent: dict[str, list[str]] = defaultdict(list)
    for i in range(240):  # 12 groups over 3 partitions, 4 shards: every shard reads all
        group = f"g{i % 12}"
        mid = f"m{i}"
        sent[group].append(mid)
        headers = (("x-message-id", mid.encode()), ("x-group-id", group.encode()))
        await world.store.produce("st.1", Record(mid.encode(), key=group.encode(), headers=headers))
    await _until(lambda: len(world.hook.ids("big")) >= 240)
    await asyncio.sleep(0.5)  # proves no duplicate shows up: it would have by now
    got = world.hook.ids("big")
    assert sorted(got) == sorted(m for ms in sent.values() for m in ms)  # each exactly once
    for group, ids in sent.items():
        assert [m for m in got if m in set(ids)] == ids, group  # produce order per group
    shares = {w.member_id: sum(r.stats.delivered for r in w.runners.values()) for w in (w1, w2)}
    print(f"deliveries per worker: {shares}")
    assert all(shares.values())
    locks = await world.catalog.store.children(paths.SUBSCRIPTION_LOCKS)
    assert sorted(locks) == sorted(f"p:big#{k}" for k in range(4))


async def test_the_segment_changes_only_when_every_shard_is_done(world: World) -> None:
    await world.store.create_topic("st.2", 3, retention_ms=3_600_000)
    for i in range(9):
        await world.store.produce("st.1", Record(b"x", key=None, headers=()), partition=i % 3)
    ends = await world.store.seal("st.1")
    topic = await world.catalog.get_topic("p", "t")
    [first] = topic.segments
    second = runner_segment(2, SegmentState.PENDING)
    await world.catalog.add_segment("p", "t", second)
    sealed = first.model_copy(update={"state": SegmentState.SEALED, "end_positions": ends})
    active = second.model_copy(update={"state": SegmentState.ACTIVE})
    await world.catalog.commit_segment_switch(topic, sealed, active)
    sub = await world.catalog.create_subscription(_sub("split", shards=2))
    await world.catalog.move_consume_pointer(sub, 1)
    sub = await world.catalog.get_subscription("p", "split")
    reader = SegmentReader(world.catalog, {"embedded": world.store})
    await reader.commit(sub, sealed, dict(ends), Shard(0, 2))
    assert await reader.try_advance(sub) is None  # shard 1 has not finished
    await reader.commit(sub, sealed, dict(ends), Shard(1, 2))
    moved = await reader.try_advance(sub)
    assert moved is not None and moved.consume_pointer is not None
    assert moved.consume_pointer.segment_id == 2


def test_shards_are_bounded() -> None:
    with pytest.raises(ValueError, match="shards"):
        _sub("x", shards=0)
    with pytest.raises(ValueError, match="shards"):
        _sub("x", shards=65)


async def test_groups_keep_their_order_across_a_segment_change(world: World) -> None:
    """3 partitions, then 2: a group's messages move partition but not shard, and the
    consume pointer waits for both shards, so nothing of segment 1 is skipped."""
    await world.catalog.create_subscription(_sub("big", shards=2, url=world.hook.url_for("big")))
    await world.worker("w1")
    await world.worker("w2")
    sent: dict[str, list[str]] = defaultdict(list)

    async def produce(storage: str, prefix: str) -> None:
        for i in range(120):
            group, mid = f"g{i % 12}", f"{prefix}{i}"
            sent[group].append(mid)
            headers = (("x-message-id", mid.encode()), ("x-group-id", group.encode()))
            await world.store.produce(storage, Record(b"x", key=group.encode(), headers=headers))

    await produce("st.1", "a")
    await world.store.create_topic("st.2", 2, retention_ms=3_600_000)
    ends = await world.store.seal("st.1")
    topic = await world.catalog.get_topic("p", "t")
    [first] = topic.segments
    second = first.model_copy(update={"id": 2, "storage_topic": "st.2", "partitions": 2})
    await world.catalog.add_segment(
        "p", "t", second.model_copy(update={"state": SegmentState.PENDING})
    )
    sealed = first.model_copy(update={"state": SegmentState.SEALED, "end_positions": ends})
    await world.catalog.commit_segment_switch(topic, sealed, second)
    await produce("st.2", "b")
    await _until(lambda: len(world.hook.ids("big")) == 240, timeout=30)
    got = world.hook.ids("big")
    for group, ids in sent.items():
        assert list(dict.fromkeys(m for m in got if m in set(ids))) == ids, group
    sub = await world.catalog.get_subscription("p", "big")
    assert sub.consume_pointer is not None and sub.consume_pointer.segment_id == 2

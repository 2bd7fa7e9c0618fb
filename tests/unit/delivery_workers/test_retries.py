"""The durable retry path on the embedded backends and a real local endpoint: delay levels,
group order under failure, DLQ and unsideline, delays, and a restart in the middle."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.audit import AuditType
from core.model import (
    RetryPolicy,
    SegmentState,
    utcnow,
)
from core.retry import level_for
from delivery_workers.http_sender import HttpSender
from delivery_workers.runner import SubscriptionRunner
from segments.protocol import Record
from segments.reader import commit_group
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.memory_audit import MemoryAudit
from tests.support.until import until as _until
from tests.support.world import (
    HOUR_MS,
    World,
    embedded_world_fixture,  # noqa: F401  (the world fixture)
    produce,
    segment,
)
from tests.support.world import layout_of as _layout
from tests.support.world import quick_running as Running
from tests.support.world import subscribe as _subscribe

FAST = RetryPolicy(
    max_attempts=5,
    backoff="fixed",
    initial_delay_ms=300,
    max_delay_ms=5_000,
    jitter=0,
    delay_levels_ms=(100, 250),
)


async def _produce(world: World, group: str, seq: int, **extra: bytes) -> str:
    return await produce(world, f"{group}-{seq}", group, **extra)


def test_a_wait_goes_to_the_largest_level_not_longer() -> None:
    levels = (1_000, 5_000, 30_000)
    assert level_for(levels, 999) is None
    assert level_for(levels, 1_000) == 1_000
    assert level_for(levels, 29_999) == 5_000
    assert level_for(levels, 3_600_000) == 30_000


async def test_retries_go_through_the_levels_on_schedule(world: World) -> None:
    """Fails twice (503): attempts 2 and 3 come one backoff (300 ms) after the previous."""
    world.hook.behaviour = lambda mid, n: (503, {}) if n <= 2 else (204, {})
    sub = await _subscribe(world, retry=FAST)
    mid = await _produce(world, "a", 0)
    async with Running(world, sub) as runner:
        await _until(lambda: world.hook.delivered() == [mid])
        assert runner.stats.retried == 2
    tries = world.hook.tries[mid]
    gaps = [b - a for a, b in zip(tries, tries[1:], strict=False)]
    assert all(0.29 <= gap <= 1.3 for gap in gaps), gaps
    assert world.hook.got[0][3] == 3  # X-Attempt


async def test_retry_after_overrides_the_backoff(world: World) -> None:
    world.hook.behaviour = lambda mid, n: (503, {"Retry-After": "1"}) if n == 1 else (204, {})
    sub = await _subscribe(world, retry=FAST)
    mid = await _produce(world, "a", 0)
    async with Running(world, sub):
        await _until(lambda: world.hook.delivered() == [mid])
    first, second = world.hook.tries[mid]
    assert 1.0 <= second - first <= 2.0


async def test_a_blocked_group_keeps_its_order_and_others_go_on(world: World) -> None:
    """A's head fails 3 times; A's later messages arrive after it, in order; B never waits."""
    world.hook.behaviour = lambda mid, n: (503, {}) if mid == "A-0" and n <= 3 else (204, {})
    sub = await _subscribe(world, retry=FAST)
    a = [await _produce(world, "A", i) for i in range(5)]
    b = [await _produce(world, "B", i) for i in range(5)]
    async with Running(world, sub) as runner:
        await _until(lambda: len(world.hook.got) == 10)
        assert runner.stats.retried == 3
    assert world.hook.of_group("A") == a
    assert world.hook.of_group("B") == b
    b_done = max(t for g, _, t, _ in world.hook.got if g == "B")
    a_first = min(t for g, _, t, _ in world.hook.got if g == "A")
    assert b_done < a_first  # B was never held behind A


async def test_dead_lettered_head_takes_its_group_and_unsideline_replays_in_order(
    world: World,
) -> None:
    world.hook.behaviour = lambda mid, n: (400, {}) if mid == "C-0" and n == 1 else (204, {})
    sub = await _subscribe(world, retry=FAST)
    c = [await _produce(world, "C", i) for i in range(4)]
    b = await _produce(world, "B", 0)
    async with Running(world, sub) as runner:
        await _until(lambda: world.hook.delivered() == [b] and runner.stats.dead_lettered == 1)
        later = await _produce(world, "C", 4)  # sidelined: straight behind the others
        layout = await _layout(world, sub)
        await _until(
            lambda: runner.retry_path is not None and runner.retry_path.counts["dead_lettered"] == 5
        )
        await asyncio.sleep(0.3)
        view = await dlq.scan(world.store, layout)
        assert [dict(m.headers)["x-message-id"].decode() for m in view.live()] == [*c, later]
        await dlq.replay(world.store, layout, dlq.select(view, dlq.Selector(group_ids={"C"})))
        await _until(lambda: len(world.hook.of_group("C")) == 5)
        after = await _produce(world, "C", 5)  # the sideline is lifted: delivered directly
        await _until(lambda: len(world.hook.of_group("C")) == 6)
        assert (await dlq.scan(world.store, layout)).live() == []
    assert world.hook.of_group("C") == [*c, later, after]
    assert world.hook.got[1][3] == 1  # attempts reset on replay


async def test_delayed_messages_keep_their_group_place(world: World) -> None:
    sub = await _subscribe(world, retry=FAST)
    due = int(time.time() * 1000) + 700
    first = await _produce(world, "D", 0, **{"x-deliver-at": str(due).encode()})
    rest = [await _produce(world, "D", i) for i in (1, 2)]
    other = await _produce(world, "E", 0)
    async with Running(world, sub):
        await _until(lambda: len(world.hook.got) == 4)
    assert world.hook.of_group("D") == [first, *rest]
    assert world.hook.delivered()[0] == other
    arrived = world.hook.got[1][2] * 1000
    assert due <= arrived <= due + 1_000


async def test_a_delayed_subscription_holds_every_message(world: World) -> None:
    sub = await _subscribe(world, retry=FAST, delay_ms=600)
    produced = time.time()
    ids = [await _produce(world, "G", i) for i in range(3)]
    async with Running(world, sub):
        await _until(lambda: len(world.hook.got) == 3)
    assert world.hook.of_group("G") == ids
    assert all(t - produced >= 0.6 for _, _, t, _ in world.hook.got)


async def test_group_state_survives_a_restart(world: World) -> None:
    """Stopped while A's head waits in a level and its followers in the hold topic: after a
    restart, A's order holds, nothing is lost, and the sources are committed to their ends."""
    world.hook.behaviour = lambda mid, n: (503, {}) if mid == "A-0" and n <= 2 else (204, {})
    slow = FAST.model_copy(update={"initial_delay_ms": 1_500, "delay_levels_ms": (250, 1_000)})
    sub = await _subscribe(world, retry=slow)
    a = [await _produce(world, "A", i) for i in range(4)]
    async with Running(world, sub) as runner:
        await _until(lambda: runner.stats.retried == 1 and runner.stats.held == 3)
        await asyncio.sleep(0.3)  # committed: the head is in a level, the rest in hold
    assert world.hook.delivered() == []
    b = await _produce(world, "B", 0)
    more = await _produce(world, "A", 4)
    async with Running(world, sub) as runner:
        await _until(lambda: len(world.hook.got) == 6)
        await asyncio.sleep(0.3)
        assert runner.retry_path is not None and runner.retry_path.groups.blocked_groups == []
    assert world.hook.of_group("A") == [*a, more]
    assert world.hook.delivered()[0] == b
    layout = await _layout(world, sub)
    for name in (layout.hold, *map(layout.level, layout.levels_ms)):
        end = (await world.store.end_positions(name)).get(0, 0)
        committed = (await world.store.committed(name, commit_group(sub))).get(0, 0)
        assert committed == end, name


async def test_attempts_exhausted_go_to_the_dlq_with_their_story(world: World) -> None:
    world.hook.behaviour = lambda mid, n: (500, {})
    policy = FAST.model_copy(update={"max_attempts": 3})
    sub = await _subscribe(world, retry=policy)
    mid = await _produce(world, "Z", 0)
    async with Running(world, sub) as runner:
        await _until(lambda: runner.stats.dead_lettered == 1)
        await asyncio.sleep(0.3)
    view = await dlq.scan(world.store, await _layout(world, sub))
    (entry,) = view.live()
    meta = RetryMeta.of(entry.headers)
    assert dict(entry.headers)["x-message-id"] == mid.encode()
    assert (meta.attempts, meta.last_status) == (3, 500)
    assert meta.first_failed_ms is not None and meta.last_failed_ms is not None
    assert meta.last_failed_ms - meta.first_failed_ms >= 550
    assert len(world.hook.tries[mid]) == 3


async def test_retried_dead_lettered_and_unsidelined_are_audited(world: World) -> None:
    world.hook.behaviour = lambda mid, n: (
        (503, {}) if n == 1 else (400, {}) if n == 2 else (204, {})
    )
    sub = await _subscribe(world, retry=FAST)
    mid = await _produce(world, "a", 0)
    recorder = MemoryAudit()
    sender = HttpSender()
    async with sender:
        runner = SubscriptionRunner(sub, world.reader, sender, audit=recorder)  # type: ignore[arg-type]
        task = asyncio.create_task(runner.run())
        try:
            await _until(lambda: runner.stats.dead_lettered == 1)
            layout = await _layout(world, sub)
            await asyncio.sleep(0.3)
            view = await dlq.scan(world.store, layout)
            await dlq.replay(world.store, layout, view.live())
            await _until(lambda: world.hook.delivered() == [mid])
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    kinds = [(e.type, e.attempt, e.status) for e in recorder.events if e.message_id == mid]
    assert (AuditType.RETRIED, 1, 503) in kinds
    assert (AuditType.DEAD_LETTERED, 2, 400) in kinds
    assert AuditType.UNSIDELINED in [k for k, _, _ in kinds]
    assert kinds[-1] == (AuditType.DELIVERED, 1, 204)  # attempts reset by the replay
    # for the trace: each attempt's latency, the level a retried message waits in
    mine = [e for e in recorder.events if e.message_id == mid]
    attempts = [e for e in mine if e.type is AuditType.ATTEMPTED]
    assert len(attempts) == 3 and all(e.latency_ms is not None for e in attempts)
    (retried,) = [e for e in mine if e.type is AuditType.RETRIED]
    assert retried.level_ms == 250  # a 300 ms wait: the largest level not longer
    first = next(e for e in recorder.events if e.message_id == mid)
    # read from the segment: the produce time rides along, for the latency report
    assert first.produced_at_ms is not None and 0 < first.at_ms - first.produced_at_ms < 60_000


async def test_a_blocked_group_stays_blocked_across_a_segment_change(world: World) -> None:
    """A's head waits in a level while the segment is sealed and a new one takes over: A's
    messages of the new segment still come after it, in order."""
    world.hook.behaviour = lambda mid, n: (503, {}) if mid == "A-0" and n <= 2 else (204, {})
    sub = await _subscribe(world, retry=FAST.model_copy(update={"initial_delay_ms": 1_000}))
    first = [await _produce(world, "A", i) for i in range(3)]
    async with Running(world, sub) as runner:
        await _until(lambda: runner.stats.retried == 1)
        await world.store.create_topic("st.2", 2, retention_ms=HOUR_MS)
        second = segment("embedded", 2, SegmentState.PENDING)
        await world.catalog.add_segment("p", "t", second)
        topic = await world.catalog.get_topic("p", "t")
        ends = await world.store.seal("st.1")
        sealed = topic.segment(1)
        assert sealed is not None
        sealed = sealed.model_copy(
            update={"state": SegmentState.SEALED, "end_positions": ends, "sealed_at": utcnow()}
        )
        active = second.model_copy(update={"state": SegmentState.ACTIVE})
        await world.catalog.commit_segment_switch(topic, sealed, active)
        later = []
        for i in range(3, 6):
            mid = f"A-{i}"
            headers = (("x-message-id", mid.encode()), ("x-group-id", b"A"))
            await world.store.produce("st.2", Record(mid.encode(), key=b"A", headers=headers))
            later.append(mid)
        await _until(lambda: runner.stats.segment == 2)
        await _until(lambda: len(world.hook.got) == 6)
    assert world.hook.of_group("A") == [*first, *later]


async def test_without_a_dlq_a_failed_message_is_dropped_and_its_group_goes_on(
    world: World,
) -> None:
    world.hook.behaviour = lambda mid, n: (400, {}) if mid == "A-0" else (204, {})
    sub = await _subscribe(world, retry=FAST, dlq_enabled=False)
    ids = [await _produce(world, "A", i) for i in range(3)]
    async with Running(world, sub) as runner:
        await _until(lambda: len(world.hook.got) == 2)
        await asyncio.sleep(0.3)
        assert runner.stats.dead_lettered == 1
    assert world.hook.of_group("A") == ids[1:]
    assert await load_layout(world.catalog.store, sub) is None  # nothing was stored
    ends = await world.store.end_positions("st.1")
    committed = await world.store.committed("st.1", commit_group(sub))
    assert committed == {p: e for p, e in ends.items() if e > 0}

"""The subscription runner end to end on the embedded backends and a real local endpoint."""

from __future__ import annotations

import asyncio
from typing import cast

import pytest

from core.errors import StorageUnavailable
from core.model import (
    CircuitBreakerPolicy,
    RetryPolicy,
)
from delivery_workers.http_sender import HttpSender
from delivery_workers.runner import DRAIN_S, SubscriptionRunner
from delivery_workers.tracking import CommitPolicy
from segments.protocol import SegmentStore
from segments.reader import SegmentReader, commit_group
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.until import until as _until
from tests.support.world import EndpointWorld as World
from tests.support.world import (
    deliver_across_a_seal,
    endpoint_world_fixture,  # noqa: F401  (the world fixture)
)
from tests.support.world import in_group_order as _in_group_order
from tests.support.world import produce_groups as _produce
from tests.support.world import start_runner as _run
from tests.support.world import stop_runner as _stop
from tests.support.world import subscribe as _subscribe


async def test_every_message_once_in_group_order_signed_and_committed(world: World) -> None:
    sub = await _subscribe(world, max_in_flight=8)
    ids = await _produce(world.store, "st.1", groups=10, per_group=20)
    runner, task, sender = await _run(world, sub)
    try:
        await _until(lambda: len(world.endpoint.received) >= 200)
        ends = await world.store.end_positions("st.1")
        await _until(lambda: runner.stats.in_flight == 0)
        await asyncio.sleep(0.5)  # one commit interval
        committed = await world.store.committed("st.1", commit_group(sub))
    finally:
        await _stop(task, sender)
    assert sorted(mid for _, mid, _ in world.endpoint.received) == sorted(ids)
    assert _in_group_order(world.endpoint.received)
    assert world.endpoint.bad_signatures == 0
    assert committed == {p: e for p, e in ends.items() if e > 0}
    assert runner.stats.delivered == 200


async def test_filter_lets_through_exactly_the_matching(world: World) -> None:
    sub = await _subscribe(world, filter='headers["x-region"] == "eu"')
    eu = await _produce(world.store, "st.1", 3, 5, {"x-region": b"eu"})
    await _produce(world.store, "st.1", 3, 5, {"x-region": b"us"})
    runner, task, sender = await _run(world, sub)
    try:
        await _until(lambda: runner.stats.filtered == 15 and len(world.endpoint.received) == 15)
        await asyncio.sleep(0.3)
    finally:
        await _stop(task, sender)
    assert sorted(mid for _, mid, _ in world.endpoint.received) == sorted(eu)


async def test_failures_are_retried_in_place_and_order_holds(world: World) -> None:
    world.endpoint.fail_first = 2
    policy = RetryPolicy(initial_delay_ms=10, max_delay_ms=50, jitter=0)
    # Two thirds of the attempts fail: a breaker would (rightly) open; this test is about retries.
    no_breaker = CircuitBreakerPolicy(enabled=False)
    sub = await _subscribe(world, retry=policy, max_in_flight=4, circuit_breaker=no_breaker)
    ids = await _produce(world.store, "st.1", groups=4, per_group=5)
    runner, task, sender = await _run(world, sub)
    try:
        await _until(lambda: len(world.endpoint.received) >= 20)
    finally:
        await _stop(task, sender)
    assert sorted(mid for _, mid, _ in world.endpoint.received) == sorted(ids)
    assert _in_group_order(world.endpoint.received)
    assert all(n == 3 for n in world.endpoint.attempts.values())
    assert runner.stats.failed_attempts == 40


async def test_moves_to_the_next_segment_after_the_seal(world: World) -> None:
    sent = await deliver_across_a_seal(world, world.store)
    got = [mid for _, mid, _ in world.endpoint.received]
    assert sorted(got) == sorted(sent)
    assert _in_group_order(world.endpoint.received)
    stored = await world.catalog.get_subscription("p", "s")
    assert stored.consume_pointer is not None and stored.consume_pointer.segment_id == 2


async def test_a_refused_message_goes_to_the_dlq_and_its_group_follows(world: World) -> None:
    """A 400 is dead-lettered at once (one attempt); the later messages of its group follow
    it into the DLQ in order; other groups go on; the source is committed past all of it."""
    world.endpoint.reject = {"st.1-g0-1"}
    policy = RetryPolicy(initial_delay_ms=10, max_delay_ms=100, jitter=0)
    sub = await _subscribe(world, retry=policy)
    await _produce(world.store, "st.1", groups=3, per_group=3)
    runner, task, sender = await _run(world, sub)
    try:
        await _until(lambda: len(world.endpoint.received) == 7 and runner.stats.dead_lettered == 1)
        await asyncio.sleep(0.6)
        committed = await world.store.committed("st.1", commit_group(sub))
        ends = await world.store.end_positions("st.1")
        async with asyncio.timeout(5):
            while (layout := await load_layout(world.catalog.store, sub)) is None:
                await asyncio.sleep(0.02)
        view = await dlq.scan(world.store, layout)
    finally:
        await _stop(task, sender)
    delivered = {mid for _, mid, _ in world.endpoint.received}
    assert "st.1-g0-1" not in delivered and "st.1-g0-2" not in delivered
    assert {f"st.1-g{g}-{s}" for g in (1, 2) for s in range(3)} <= delivered
    assert world.endpoint.attempts["st.1-g0-1"] == 1  # no retry of a 400
    in_dlq = [dict(m.headers)["x-message-id"].decode() for m in view.live()]
    assert in_dlq == ["st.1-g0-1", "st.1-g0-2"]
    first = RetryMeta.of(view.live()[0].headers)
    assert first.last_status == 400 and first.attempts == 1
    assert committed == {p: e for p, e in ends.items() if e > 0}


class _SlowCommits:
    """The store, with every commit taking ``delay_s`` (a Pulsar commit is a REST call)."""

    def __init__(self, store: SegmentStore, delay_s: float) -> None:
        self._store = store
        self._delay_s = delay_s
        self.started = asyncio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        self.started.set()
        await asyncio.sleep(self._delay_s)
        await self._store.commit(name, group, positions)


async def test_what_ends_during_a_slow_commit_is_committed_by_the_next(world: World) -> None:
    sub = await _subscribe(world, max_in_flight=1)
    await _produce(world.store, "st.1", groups=4, per_group=1)
    slow = _SlowCommits(world.store, delay_s=1.0)
    sender = HttpSender()
    await sender.start()
    reader = SegmentReader(world.catalog, {"embedded": cast(SegmentStore, slow)})
    runner = SubscriptionRunner(
        sub, reader, sender, commit_policy=CommitPolicy(every_n=1_000, every_s=0.1)
    )
    task = asyncio.create_task(runner.run())
    try:
        await asyncio.wait_for(slow.started.wait(), 10)  # the first commit is on the wire:
        await _produce(world.store, "st.1", groups=4, per_group=4, first_seq=1)  # these end
        await _until(lambda: len(world.endpoint.received) == 20)  # during it
        ends = {p: e for p, e in (await world.store.end_positions("st.1")).items() if e > 0}

        async def committed() -> dict[int, int]:
            return await world.store.committed("st.1", commit_group(sub))

        async with asyncio.timeout(5):  # the first commit took the positions of the first few
            while await committed() != ends:
                await asyncio.sleep(0.1)
    finally:
        await _stop(task, sender)


async def test_a_stopped_runner_lets_its_deliveries_in_flight_end_and_commits_them(
    world: World,
) -> None:
    """Stopping a runner (a rebalance, a pause, a deploy) does not cancel the deliveries its
    endpoint is answering: their answers are taken and committed, so the next owner does not
    deliver them again. One whose lock is gone stops at once instead (``abandon``)."""
    sub = await _subscribe(world, max_in_flight=8)
    await _produce(world.store, "st.1", groups=8, per_group=1)
    world.hook.delay = lambda path: 0.5  # every answer takes half a second
    runner, task, sender = await _run(world, sub)
    await _until(lambda: runner.stats.in_flight == 8, 10, "8 deliveries in flight")
    stopping = asyncio.get_running_loop().time()
    await _stop(task, sender)
    took = asyncio.get_running_loop().time() - stopping
    ends = await world.store.end_positions("st.1")
    committed = await world.store.committed("st.1", commit_group(sub))
    assert runner.stats.delivered == 8 and len(world.endpoint.received) == 8
    assert committed == {p: e for p, e in ends.items() if e > 0}
    assert took < 0.5 + DRAIN_S

    await _produce(world.store, "st.1", groups=4, per_group=1)
    runner, task, sender = await _run(world, sub)
    await _until(lambda: runner.stats.in_flight == 4, 10, "4 deliveries in flight")
    runner.abandon()
    await _stop(task, sender)
    assert runner.stats.delivered == 0  # cancelled: the next owner delivers them


async def test_a_stopped_runner_sends_no_retry_waiting_its_backoff(world: World) -> None:
    """Only the requests on the wire are let end: an attempt waiting for its retry is
    cancelled, not sent (a paused subscription sends nothing new)."""
    world.hook.behaviour = lambda mid, attempt: (503, {}) if attempt == 1 else (204, {})
    policy = RetryPolicy(backoff="fixed", initial_delay_ms=3_000, jitter=0)
    policy = policy.model_copy(update={"delay_levels_ms": (60_000,)})  # in place, not a level
    sub = await _subscribe(world, retry=policy, max_in_flight=4)
    await _produce(world.store, "st.1", groups=4, per_group=1)
    runner, task, sender = await _run(world, sub)
    await _until(lambda: runner.stats.failed_attempts == 4, 10, "4 first attempts failed")
    stopping = asyncio.get_running_loop().time()
    await _stop(task, sender)
    assert asyncio.get_running_loop().time() - stopping < 1.0  # nothing on the wire to wait for
    assert runner.stats.attempts == 4 and runner.stats.delivered == 0
    assert all(n == 1 for n in world.endpoint.attempts.values())


class _FailingCommits(_SlowCommits):
    """The store, with every commit refused (a storage outage)."""

    async def commit(self, name: str, group: str, positions: dict[int, int]) -> None:
        self.started.set()
        raise StorageUnavailable("commits refused (the test's outage)")


async def test_a_runner_failing_on_its_commits_leaves_none_of_its_tasks_running(
    world: World,
) -> None:
    """A failed commit no longer ends the runner (the next one supersedes it); stopped while
    its commits fail, its clean-up (whose final commit fails too) still ends every task it
    started: once a failed step skipped the rest, and the retry readers and the hand-off
    stayed running, unowned ("Task was destroyed but it is pending!" in a worker's log)."""
    sub = await _subscribe(world)
    await _produce(world.store, "st.1", groups=2, per_group=2)
    failing = _FailingCommits(world.store, delay_s=0)
    sender = HttpSender()
    await sender.start()
    reader = SegmentReader(world.catalog, {"embedded": cast(SegmentStore, failing)})
    runner = SubscriptionRunner(sub, reader, sender, commit_policy=CommitPolicy(every_s=0.1))
    before = asyncio.all_tasks()
    task = asyncio.create_task(runner.run())
    try:
        await _until(lambda: runner.stats.failed_commits >= 2, 20, "commits failing")
        assert not task.done()  # delivering on
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        left = [t for t in asyncio.all_tasks() - before - {task} if _of_the_runner(t)]
        assert left == [], left
    finally:
        await sender.aclose()


def _of_the_runner(task: asyncio.Task[object]) -> bool:
    """A task still running code of ``delivery_workers`` (not the endpoint double's)."""
    code = getattr(task.get_coro(), "cr_code", None)
    return not task.done() and code is not None and "delivery_workers" in code.co_filename

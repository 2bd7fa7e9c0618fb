"""A subscription with an expensive filter never holds the worker's event loop: its reading
yields after every few milliseconds of filter time and sleeps past its share
(delivery_workers/filter_budget.py), so another subscription of the worker goes on."""

from __future__ import annotations

import asyncio
import gc
import json
import time
from collections.abc import Callable
from pathlib import Path

from core.filters import MAX_BODY_BYTES, compile_filter, parse_body
from core.model import Subscription
from delivery_workers.filter_budget import FilterBudget
from delivery_workers.runner import SubscriptionRunner
from segments.protocol import Record
from tests.support.until import until
from tests.support.world import Running, World, embedded_world, record, subscribe

# The costliest filter a client may write on a small message: a 2 000-item list (4 046 of the
# 4 096 characters allowed) and a regular expression per item, about 11 ms an evaluation here,
# so a read batch of 100 would be 1.1 s of filter in one go.
HOSTILE = "[" + ",".join(["1"] * 2_000) + '].exists(x, headers["x-h0"].matches("(a+)+b"))'
HEADERS = (("x-h0", b"a" * 500),)
COUNT = 100


class LoopLag:
    """The longest the event loop was held while it runs: a 5 ms sleep, measured in the CPU
    time of the loop's thread (``time.thread_time``), so that a machine too busy to run the
    process at all (a parallel test lane, a niced one) is not counted as the loop held.

    ``worst`` leaves out the time the garbage collector ran meanwhile (``worst_gc``, the
    longest collection): a full collection holds the whole process for a time that grows with
    its heap, whatever the filters; it is no filter time, and the budget cannot charge it."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_gc = 0.0
        self._gc_s = 0.0
        self._gc_started = 0.0
        self._task: asyncio.Task[None] | None = None

    def _collecting(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.thread_time()
        else:
            took = time.thread_time() - self._gc_started
            self._gc_s += took
            self.worst_gc = max(self.worst_gc, took)

    async def _probe(self) -> None:
        while True:
            start, collected = time.thread_time(), self._gc_s
            await asyncio.sleep(0.005)
            held = time.thread_time() - start - (self._gc_s - collected)
            self.worst = max(self.worst, held)

    def __enter__(self) -> LoopLag:
        gc.callbacks.append(self._collecting)
        self._task = asyncio.create_task(self._probe())
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._collecting)
        assert self._task is not None
        self._task.cancel()


async def test_a_backlog_of_expensive_filters_never_holds_the_event_loop(tmp_path: Path) -> None:
    async with embedded_world(tmp_path, partitions=1, grouped=False) as world:
        hostile = await subscribe(world, "hostile", filter=HOSTILE)
        plain = await subscribe(world, "plain", filter='headers["x-h0"] != ""')
        for i in range(COUNT):
            base = record(f"m{i}", None)
            await world.store.produce(
                world.storage, Record(base.value, key=None, headers=base.headers + HEADERS)
            )
        work = COUNT * _evaluation_s()  # the filter time of the whole backlog, here and now
        lag, _ = await _filtered_under_watch(world, hostile, plain, COUNT, "the hostile filter")
    print(
        f"\nworst event-loop stall with {COUNT} hostile evaluations: {lag.worst * 1000:.1f} ms "
        f"of {work * 1000:.0f} ms of filter work"
    )
    # Without the budget one read batch holds the loop for all of it (1 084 ms of 1 100 here);
    # with it, about one evaluation and a slice. A share, not a time: it holds under load.
    assert lag.worst < 0.3 * work, f"the event loop was held {lag.worst:.3f} s of {work:.3f} s"


async def _filtered_under_watch(
    world: World, filtering: Subscription, plain: Subscription, count: int, what: str
) -> tuple[LoopLag, SubscriptionRunner]:
    """``filtering`` and ``plain`` run side by side until the first has filtered ``count``
    messages (the event loop watched meanwhile) and the second delivered ``count``."""
    async with Running(world, filtering) as slow, Running(world, plain) as fast:
        with LoopLag() as lag:
            await until(lambda: slow.stats.filtered >= count, 60, what)
        await until(lambda: fast.stats.delivered >= count, 60, "the plain subscription")
    return lag, slow


def _json_body(size: int) -> bytes:
    """A JSON object of about ``size`` bytes: an order with many line items."""
    items: list[object] = []
    order = {"region": "eu", "amount": 150, "items": items}
    step = len(json.dumps({"sku": "abc-00000", "qty": 3, "tags": ["x", "y"]})) + 2
    items.extend({"sku": f"abc-{i:05}", "qty": 3, "tags": ["x", "y"]} for i in range(size // step))
    return json.dumps(order).encode()


# The costliest body a filter parses: MAX_BODY_BYTES of JSON (about 5 ms to parse, 5 more for
# CEL to take it in, per evaluation here). The worst stall left (~130 ms here) is not filter
# time but a full collection of the garbage collector, which the parsed objects bring on
# sooner; it scales with the process's heap, and the budget cannot charge it (LoopLag).
BIG_BODY = _json_body(MAX_BODY_BYTES - 100)
BODY_COUNT = 40
EXPR = 'body.region == "us" && body.amount > 100'


async def test_a_backlog_of_the_largest_json_bodies_never_holds_the_event_loop(
    tmp_path: Path,
) -> None:
    async with embedded_world(tmp_path, partitions=1, grouped=False) as world:
        body = await subscribe(world, "body", filter=EXPR)
        plain = await subscribe(world, "plain", filter='headers["x-message-id"] != ""')
        for i in range(BODY_COUNT):
            base = record(f"m{i}", None)
            await world.store.produce(world.storage, Record(BIG_BODY, None, base.headers))
        matcher = compile_filter(body.filter)
        work = BODY_COUNT * _evaluation_s(
            lambda: matcher.matches(
                (), group=None, topic="p/t", content_type=None, body=parse_body(BIG_BODY)
            )
        )
        lag, slow = await _filtered_under_watch(world, body, plain, BODY_COUNT, "the body filter")
    print(
        f"\nworst event-loop stall with {BODY_COUNT} body filters on {len(BIG_BODY)} B: "
        f"{lag.worst * 1000:.1f} ms of {work * 1000:.0f} ms of filter work "
        f"(and a garbage collection of {lag.worst_gc * 1000:.0f} ms)"
    )
    assert slow.stats.filter_errors == 0  # parsed and evaluated, not refused
    assert lag.worst < 0.3 * work, f"the event loop was held {lag.worst:.3f} s of {work:.3f} s"


def _evaluation_s(evaluate: Callable[[], object] | None = None) -> float:
    """The median CPU time of one evaluation of the hostile filter on this machine, now."""
    matcher = compile_filter(HOSTILE)
    times = []
    for _ in range(5):
        started = time.thread_time()
        if evaluate is None:
            matcher.matches(HEADERS, group=None, topic="p/t", content_type=None)
        else:
            evaluate()
        times.append(time.thread_time() - started)
    return sorted(times)[2]


async def test_the_budget_yields_every_slice_and_sleeps_past_its_share() -> None:
    now = [0.0]
    budget = FilterBudget(share=0.5, burst_s=0.1, slice_s=0.005, clock=lambda: now[0])
    started = time.perf_counter() - 0.004  # an evaluation of 4 ms: within the slice
    await budget.spend(started)
    assert budget.throttled_s == 0
    started = time.perf_counter() - 0.2  # 0.2 s more: 0.104 s past a 0.1 s burst
    now[0] = 0.0
    sleeping = asyncio.create_task(budget.spend(started))
    await asyncio.sleep(0)
    assert 0.2 < budget.throttled_s < 0.25  # the debt at half a second a second
    sleeping.cancel()

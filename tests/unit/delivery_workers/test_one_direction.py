"""Following a failing delivery from the read to the DLQ, no module of the product calls back
into a module that called it (docs/architecture.md, "Follow one message").

A profiler hook watches every call of a product function while one grouped message fails
into a delay level, comes back, fails for good and goes to the DLQ with its group's follower
behind it. For each call it looks at the product modules on the calling stack: across
awaits within the task, and on through the stack that created the task (a task factory
records it), so a task started by one module counts as a call from it. The called module
must be the caller's own, or one not on the stack yet. A callback (``A → B → A``: a
closure, a hook attribute, a method of the caller passed down, an attempt started by the
dispatch that calls the dispatch) breaks that, and the test names the stack.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from types import FrameType
from typing import Any

from core.model import RetryPolicy
from segments.subscription import dlq
from tests.support.until import until
from tests.support.world import (
    World,
    embedded_world_fixture,  # noqa: F401  (the world fixture)
    layout_of,
    produce,
    quick_running,
    subscribe,
)

PRODUCT = ("delivery_workers", "segments", "core", "metastore", "circuit_breaker")
# Runs the work its caller hands it (a coroutine the caller made), as asyncio does: the
# work is the caller's, so these frames count as asyncio's, not as a module of their own.
TRANSPARENT = {"core.tasks"}
# A first failure waits 300 ms in the 250 ms level; the second is the last attempt.
ONCE_THEN_DLQ = RetryPolicy(max_attempts=2, initial_delay_ms=300, delay_levels_ms=(100, 250))


def _module(frame: FrameType) -> str | None:
    name = frame.f_globals.get("__name__", "")
    if not isinstance(name, str) or name in TRANSPARENT:
        return None
    return name if name.split(".")[0] in PRODUCT else None


class CallWatch:
    """The profiler hook: the modules in the order they were first entered, and every call
    into a module that is already on the stack below its caller."""

    def __init__(self) -> None:
        self.first_seen: list[str] = []
        self.backward: set[tuple[str, ...]] = set()
        self._created_by: dict[asyncio.Task[Any], list[str]] = {}

    def task_factory(
        self, loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kw: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kw)
        self._created_by[task] = self._stack(sys._getframe(1))
        return task

    def _stack(self, frame: FrameType | None) -> list[str]:
        """The product modules from ``frame`` down, then the creators' (runs collapsed)."""
        stack: list[str] = []
        while frame is not None:
            module = _module(frame)
            if module is not None and (not stack or stack[-1] != module):
                stack.append(module)
            frame = frame.f_back
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no loop running
            task = None
        for module in self._created_by.get(task, []) if task is not None else []:
            if not stack or stack[-1] != module:
                stack.append(module)
        return stack

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        called = _module(frame)
        if called is None:
            return
        if called not in self.first_seen:
            self.first_seen.append(called)
        stack = self._stack(frame.f_back)  # the caller first
        if stack and stack[0] != called and called in stack[1:]:
            self.backward.add((*reversed(stack), called))


async def test_a_failing_delivery_goes_one_way_to_the_dlq(world: World) -> None:
    world.hook.behaviour = lambda mid, n: (503, {}) if mid == "A-0" else (204, {})
    sub = await subscribe(world, retry=ONCE_THEN_DLQ)
    watch = CallWatch()
    loop = asyncio.get_running_loop()
    loop.set_task_factory(watch.task_factory)
    sys.setprofile(watch)
    try:
        async with quick_running(world, sub) as runner:
            await produce(world, "A-0", "A")
            await produce(world, "A-1", "A")  # its follower: held, then to the DLQ after it
            await until(lambda: runner.stats.dead_lettered == 1, 20, "A-0 dead-lettered")
            layout = await layout_of(world, sub)

            async def both_in_dlq() -> bool:
                return len((await dlq.scan(world.store, layout)).live()) == 2

            await until(both_in_dlq, 20, "A-0 and its follower in the DLQ")
    finally:
        sys.setprofile(None)
        loop.set_task_factory(None)
    assert runner.stats.retried == 1 and world.hook.delivered() == []
    assert watch.backward == set(), "\n".join(" → ".join(s) for s in sorted(watch.backward))

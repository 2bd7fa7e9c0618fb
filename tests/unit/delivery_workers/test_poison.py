"""A poison message: one the worker itself cannot handle (the sender raises on it) fails
alone, by its retry policy, into the DLQ; every message behind it, in its group or not, is
still delivered within seconds (issue 17: one client's bad message once stopped a topic)."""

from __future__ import annotations

import asyncio
import contextlib

from core.model import RetryPolicy, Subscription
from core.result import DeliveryResult
from delivery_workers.commit import CommitPolicy
from delivery_workers.fast_sender import FastSender
from delivery_workers.runner import SubscriptionRunner
from delivery_workers.sender import Delivery
from segments.protocol import Record
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.until import until
from tests.support.world import EndpointWorld as World
from tests.support.world import (
    endpoint_world_fixture,  # noqa: F401  (the world fixture)
    subscribe,
)

POISON = "poison"
BEHIND = 50


class RaisesOnPoison(FastSender):
    """The production sender, except that it raises on the poison message (as an unforeseen
    bug in preparing, signing or sending one message would)."""

    async def send(self, delivery: Delivery) -> DeliveryResult:
        if delivery.message_id == POISON:
            raise UnicodeDecodeError("utf-8", b"\xe9", 0, 1, "invalid continuation byte")
        return await super().send(delivery)


async def _run_with_poison(world: World, grouped: bool) -> tuple[set[str], list[RetryMeta]]:
    policy = RetryPolicy(max_attempts=2, initial_delay_ms=10, max_delay_ms=50, jitter=0)
    sub: Subscription = await subscribe(world, retry=policy)
    # Grouped: the poison heads group "bad"; three more of "bad" follow it, the rest spread
    # over five other groups. Ungrouped: no group at all.
    plan = [(POISON, "bad"), *((f"m{i}", f"g{i % 5}") for i in range(BEHIND))]
    plan[10:10] = [(f"bad{i}", "bad") for i in range(3)]
    for mid, group in plan:
        headers = (("x-message-id", mid.encode()),)
        if grouped:
            headers += (("x-group-id", group.encode()),)
        await world.store.produce("st.1", Record(mid.encode(), key=group.encode(), headers=headers))
    async with RaisesOnPoison() as sender:
        runner = SubscriptionRunner(
            sub, world.reader, sender, commit_policy=CommitPolicy(every_n=10, every_s=0.1)
        )
        task = asyncio.create_task(runner.run())
        try:
            await until(
                lambda: len({m for _, m, _ in world.endpoint.received}) >= BEHIND, 10, "the rest"
            )
            layout = await until(lambda: load_layout(world.catalog.store, sub), 5, "the layout")
            view = await until(lambda: _dead(world, layout), 10, "the poison message in the DLQ")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    delivered = {m for _, m, _ in world.endpoint.received}
    return delivered, [RetryMeta.of(m.headers) for m in view.live()]


async def _dead(world: World, layout: object) -> dlq.DlqView | None:
    view = await dlq.scan(world.store, layout)  # type: ignore[arg-type]
    return view if view.live() else None


async def test_a_poison_message_of_a_group_stops_only_its_group(world: World) -> None:
    """Its group follows it into the DLQ in order (group order is the contract: an operator
    unsidelines them together); every other group goes on."""
    delivered, dead = await _run_with_poison(world, grouped=True)
    assert delivered == {f"m{i}" for i in range(BEHIND)}
    assert [m.attempts for m in dead][0] == 2
    assert "UnicodeDecodeError" in (dead[0].last_error or "")


async def test_an_ungrouped_poison_message_fails_alone(world: World) -> None:
    delivered, dead = await _run_with_poison(world, grouped=False)
    assert delivered == {f"m{i}" for i in range(BEHIND)} | {f"bad{i}" for i in range(3)}
    assert [m.attempts for m in dead] == [2]
    assert "UnicodeDecodeError" in (dead[0].last_error or "")

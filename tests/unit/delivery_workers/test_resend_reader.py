"""The worker's side of resend and recover (control_plane.services.resends, dead_letters):
a record of the replay topic marked as a resend goes through the subscription's filter (it
comes from the topic, not from this subscription's DLQ), and each kind is audited as what it
is, so the message's trace shows the resend or the recovery; a window replay (docs/archive.md)
too, delivered with X-Replay: true."""

from __future__ import annotations

import asyncio

import pytest

from core.audit import AuditType
from delivery_workers.http_sender import HttpSender
from delivery_workers.runner import SubscriptionRunner
from segments.protocol import Stored
from segments.subscription import dlq
from segments.subscription.layout import ensure_layout
from segments.subscription.retry_meta import RetryMeta, internal_record
from tests.support.memory_audit import MemoryAudit
from tests.support.until import until
from tests.support.world import (
    World,
    embedded_world_fixture,  # noqa: F401  (the world fixture)
    record,
    subscribe,
)


def _stored(mid: str, **headers: bytes) -> Stored:
    r = record(mid, None, **headers)
    return Stored(0, 7, 0, r.value, r.key, r.headers)


async def test_resends_pass_the_filter_and_every_kind_is_audited(world: World) -> None:
    sub = await subscribe(world, filter='headers["x-kind"] == "order"')
    layout = await ensure_layout(world.meta, {world.cluster: world.store}, sub, world.cluster)
    recorder = MemoryAudit()
    async with HttpSender() as sender:
        runner = SubscriptionRunner(sub, world.reader, sender, audit=recorder)  # type: ignore[arg-type]
        task = asyncio.create_task(runner.run())
        try:
            for mid, kind, origin in (("r1", b"order", "1:0:7"), ("r2", b"test", "1:0:8")):
                resent = _stored(mid, **{"x-kind": kind})
                await dlq.resend(world.store, layout, resent, origin, "p/t")
            entry = internal_record(_stored("d1"), RetryMeta("1:0:9", "p/t", attempts=3))
            await world.store.produce(layout.dlq, entry, partition=0)
            view = await dlq.scan(world.store, layout)
            await dlq.replay(world.store, layout, view.live(), dlq.RECOVER)
            await until(lambda: sorted(world.hook.delivered()) == ["d1", "r1"], 10)
            await until(lambda: [e for e in recorder.events if e.type is AuditType.FILTERED], 5)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert world.hook.delivered() == ["r1", "d1"]  # in the replay topic's order
    kinds = {(e.message_id, e.type) for e in recorder.events}
    assert {("r1", AuditType.RESENT), ("r2", AuditType.RESENT)} <= kinds
    assert ("d1", AuditType.RECOVERED) in kinds and ("d1", AuditType.RESENT) not in kinds
    filtered = [e for e in recorder.events if e.type is AuditType.FILTERED]
    assert [(e.message_id, e.reason) for e in filtered] == [
        ("r2", "resend: the filter left it out")
    ]
    # A recovered entry is not filtered again: it passed the filter before it failed.
    assert world.hook.tries["d1"] and "r2" not in world.hook.tries


async def test_a_window_replay_passes_the_filter_is_audited_replayed_and_marked(
    world: World,
) -> None:
    sub = await subscribe(world, filter='headers["x-kind"] == "order"')
    layout = await ensure_layout(world.meta, {world.cluster: world.store}, sub, world.cluster)
    recorder = MemoryAudit()
    window = [
        (_stored(mid, **{"x-kind": kind}), f"1:0:{i}")
        for i, (mid, kind) in enumerate((("w1", b"order"), ("w2", b"test"), ("w3", b"order")))
    ]
    async with HttpSender() as sender:
        runner = SubscriptionRunner(sub, world.reader, sender, audit=recorder)  # type: ignore[arg-type]
        task = asyncio.create_task(runner.run())
        try:
            await dlq.replay_window(world.store, layout, window, "p/t")
            await until(lambda: world.hook.delivered() == ["w1", "w3"], 10)
            await until(lambda: [e for e in recorder.events if e.type is AuditType.FILTERED], 5)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
    assert {e.message_id for e in recorder.events if e.type is AuditType.REPLAYED} == {
        "w1",
        "w2",
        "w3",
    }
    filtered = [e for e in recorder.events if e.type is AuditType.FILTERED]
    assert [(e.message_id, e.reason) for e in filtered] == [
        ("w2", "replay: the filter left it out")
    ]
    stored = await world.store.read(layout.replay, 0, 0, max_records=5)
    assert all(("x-replay", b"true") in m.headers for m in stored)
    sent = [r for r in world.hook.requests if r.id in ("w1", "w3")]
    assert sent and all(r.headers.get("X-Replay") == "true" for r in sent)

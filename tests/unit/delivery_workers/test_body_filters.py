"""Body filters in the worker (embedded backend): a JSON body is filtered on its fields, a
payload that is not a JSON object is filtered with its reason in the audit trail (never
attempted, never retried), and subscriptions that share a read parse each message once."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from core.audit import AuditType
from core.model import Endpoint
from delivery_workers.bodies import BodyCache
from delivery_workers.http_sender import HttpSender
from delivery_workers.runner import SubscriptionRunner
from delivery_workers.shared_reads import SharedSegmentReader
from delivery_workers.tracking import CommitPolicy
from segments.protocol import Record, Stored
from tests.support.memory_audit import MemoryAudit
from tests.support.until import until
from tests.support.world import embedded_world, record, subscribe

PAYLOADS = {
    "eu-big": json.dumps({"region": "eu", "amount": 500, "customer": {"vip": True}}).encode(),
    "eu-small": json.dumps({"region": "eu", "amount": 5}).encode(),
    "us-vip": json.dumps({"region": "us", "amount": 900, "customer": {"vip": False}}).encode(),
    "text": b"region=eu amount=500",
    "list": b'[{"region": "eu"}]',
}


async def test_body_filters_deliver_filter_and_name_the_reason(tmp_path: Path) -> None:
    async with embedded_world(tmp_path, partitions=1, grouped=False) as world:
        big = await subscribe(
            world,
            "big",
            filter='body.region == "eu" && body.amount > 100',
            endpoint=Endpoint(url=world.hook.url_for("big")),
        )
        vip = await subscribe(
            world,
            "vip",
            filter="has(body.customer) && has(body.customer.vip)",
            endpoint=Endpoint(url=world.hook.url_for("vip")),
        )
        reader = SharedSegmentReader(world.catalog, world.stores)
        bodies, audit, sender = BodyCache(), MemoryAudit({AuditType.FILTERED}), HttpSender()
        await sender.start()
        policy = CommitPolicy(every_n=10, every_s=0.1)
        runners = [
            SubscriptionRunner(s, reader, sender, audit=audit, commit_policy=policy, bodies=bodies)
            for s in (big, vip)
        ]
        tasks = [asyncio.create_task(r.run()) for r in runners]
        try:
            await until(lambda: all(r.walk.intake is not None for r in runners), 10, "reading")
            for mid, payload in PAYLOADS.items():
                base = record(mid, None)
                await world.store.produce(world.storage, Record(payload, None, base.headers))
            await until(
                lambda: all(r.stats.delivered + r.stats.filtered == 5 for r in runners),
                30,
                "every message delivered or filtered by both",
            )
            await until(lambda: len(audit.events) == 7, 10, "the filtered events")
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await sender.aclose()
    assert sorted(world.hook.ids("big")) == ["eu-big"]
    assert sorted(world.hook.ids("vip")) == ["eu-big", "us-vip"]
    reasons = {(e.subscription, e.message_id): e.reason for e in audit.events}
    assert reasons[("p/big", "eu-small")] is None  # filtered out, no error
    assert reasons[("p/vip", "eu-small")] is None  # has() is false, no error
    for sub in ("p/big", "p/vip"):
        assert (reasons[(sub, "text")] or "").startswith("body: not JSON")
        assert reasons[(sub, "list")] == "body: a JSON list, a filter needs an object"
    assert reasons[("p/big", "us-vip")] is None  # && stops at region: no error
    assert [r.stats.filter_errors for r in runners] == [2, 2]
    assert all(r.stats.failed_attempts == 0 and r.stats.retried == 0 for r in runners)
    # A message both read from the shared tail is parsed once for the two; one a runner read
    # from storage on its own (it started before the tail held it) once more.
    assert len(PAYLOADS) <= bodies.parsed <= 2 * len(PAYLOADS)


def test_the_cache_parses_one_message_once_and_equal_copies_apart() -> None:
    bodies = BodyCache(size=2, max_bytes=1_000)
    one = Stored(0, 0, 0, b'{"a": 1}')
    assert bodies.body(one) is bodies.body(one) and bodies.parsed == 1
    copy = Stored(0, 0, 0, b'{"a": 1}')  # read from storage again: another object
    assert bodies.body(copy) is not bodies.body(one) and bodies.parsed == 2
    bodies.body(Stored(0, 1, 0, b'{"b": 2}'))  # past size: the oldest (one) goes
    bodies.body(one)
    assert bodies.parsed == 4
    big = Stored(0, 2, 0, b'{"c": "' + b"x" * 2_000 + b'"}')  # past max_bytes: not kept
    bodies.body(big)
    bodies.body(big)
    assert bodies.parsed == 6

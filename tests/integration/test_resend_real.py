"""Resend and recover on real ZooKeeper, Kafka and PostgreSQL with a real worker (issue 40,
item 2): a resend of one id reaches that one subscription only, through its filter and its
signing, and the message's trace shows it; a recovery between two times re-delivers exactly
the messages that failed in that window, and nothing that failed before or after it or was
delivered in it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

from core.model import RetryPolicy
from tests.support.delivery import (
    DeliveryWorld,
    audited_world_fixture,  # noqa: F401  (the world fixture)
)
from tests.support.hook import SECRET
from tests.support.until import until

SUBS = "/v1/projects/shop/subscriptions"
TRACE = "/v1/projects/shop/topics/orders/messages"
QUIET_S = 2.0  # how long nothing must arrive where nothing may (the only sleep here)


async def _trace(world: DeliveryWorld, mid: str) -> dict[str, Any] | None:
    r = await world.cp.get(f"{TRACE}/{mid}")
    return r.json() if r.status_code == 200 else None


def _of(trace: dict[str, Any] | None, sub: str) -> dict[str, Any]:
    assert trace is not None
    return next(s for s in trace["subscriptions"] if s["subscription"] == sub)


def _types(trace: dict[str, Any] | None, sub: str) -> list[str]:
    return [e["type"] for e in _of(trace, sub)["events"]]


async def _traced(world: DeliveryWorld, mid: str, sub: str, *last: str) -> dict[str, Any] | None:
    """The trace of ``mid`` once ``sub``'s last events are ``last``."""
    trace = await _trace(world, mid)
    if trace is None:
        return None
    return trace if _types(trace, sub)[-len(last) :] == list(last) else None


async def test_a_resend_reaches_one_subscription_only(world: DeliveryWorld) -> None:
    world.hook.secret = SECRET
    await world.topic("orders", partitions=2)
    await world.subscribe("mailer", "orders", filter='headers["x-kind"] == "order"')
    await world.subscribe("ledger", "orders")
    for name in ("mailer", "ledger"):
        await world.running(name)
    await world.produce("orders", b"one", {"X-Message-Id": "o1", "X-Kind": "order"})
    await world.produce("orders", b"two", {"X-Message-Id": "t1", "X-Kind": "test"})
    hook = world.hook
    await until(lambda: hook.ids("mailer") == ["o1"], 30, "o1 at mailer")
    await until(lambda: sorted(hook.ids("ledger")) == ["o1", "t1"], 30, "both at ledger")
    # Both are in the trace index with their outcome before they are resent.
    await until(lambda: _traced(world, "o1", "shop/mailer", "delivered"), 15, "o1 traced")
    await until(lambda: _traced(world, "t1", "shop/mailer", "filtered"), 15, "t1 traced")

    started = time.monotonic()
    r = await world.cp.post(f"{SUBS}/mailer/resend", json={"message_id": "o1"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["subscription"] == "shop/mailer" and body["trace"] == f"{TRACE}/o1"
    await until(lambda: hook.ids("mailer") == ["o1", "o1"], 30, "o1 resent to mailer")
    took = time.monotonic() - started
    again = hook.on("mailer")[-1]
    assert again.body == b"one" and again.headers["X-Attempt"] == "1"
    # Filtered at mailer: a resend goes through the filter, so it is not delivered.
    r = await world.cp.post(f"{SUBS}/mailer/resend", json={"message_id": "t1"})
    assert r.status_code == 202, r.text
    ends = ("resent", "attempted", "delivered")
    trace = await until(lambda: _traced(world, "o1", "shop/mailer", *ends), 15, "o1")
    resent = await until(lambda: _traced(world, "t1", "shop/mailer", "resent", "filtered"), 15)
    await asyncio.sleep(QUIET_S)  # ledger must see nothing of either resend
    assert sorted(hook.ids("ledger")) == ["o1", "t1"]
    assert hook.ids("mailer") == ["o1", "o1"]
    assert hook.bad_signatures == 0

    mailer = _of(trace, "shop/mailer")
    assert _types(trace, "shop/mailer")[-3:] == ["resent", "attempted", "delivered"]
    assert mailer["state"] == "delivered" and len(mailer["attempts"]) == 2
    assert "resent" not in _types(trace, "shop/ledger")
    assert _types(resent, "shop/mailer")[-2:] == ["resent", "filtered"]
    assert "resent" not in _types(await _trace(world, "t1"), "shop/ledger")

    missing = await world.cp.post(f"{SUBS}/mailer/resend", json={"message_id": "nope"})
    assert missing.status_code == 404 and "trace index" in missing.json()["message"]
    print(f"\nresend of o1 delivered {took:.2f} s after the request (first resend of mailer)")


def _now() -> str:
    return datetime.now(UTC).isoformat()


async def _dlq_ids(world: DeliveryWorld) -> list[str]:
    r = await world.cp.get(f"{SUBS}/ledger/dlq/messages", params={"order": "oldest"})
    assert r.status_code == 200, r.text
    return [m["message_id"] for m in r.json()["messages"]]


async def test_recover_redelivers_exactly_the_window(world: DeliveryWorld) -> None:
    hook = world.hook
    failing = True
    # "f…" fail with a 400 (straight to the DLQ) while failing; "ok…" are delivered.
    hook.behaviour = lambda mid, n: (400, {}) if failing and mid.startswith("f") else (204, {})
    await world.topic("orders", partitions=2)
    await world.subscribe("ledger", "orders", retry=RetryPolicy(max_attempts=1).model_dump())
    await world.running("ledger")
    edges = [_now()]
    phases = ("a", "b", "c")
    for phase in phases:
        for i in range(3):
            await world.produce("orders", b"x", {"X-Message-Id": f"f{phase}{i}"})
        await world.produce("orders", b"y", {"X-Message-Id": f"ok{phase}"})
        wanted = [f"f{p}{i}" for p in phases[: phases.index(phase) + 1] for i in range(3)]

        async def dead(wanted: list[str] = wanted) -> bool:
            return sorted(await _dlq_ids(world)) == wanted

        await until(dead, 30, f"phase {phase} dead-lettered")
        await until(lambda phase=phase: f"ok{phase}" in hook.ids("ledger"), 30, "ok")
        edges.append(_now())
    failing = False
    window = {"since": edges[1], "until": edges[2]}  # phase b's failures only
    r = await world.cp.post(f"{SUBS}/ledger/recover", json={**window, "limit": 2})
    assert r.status_code == 200, r.text
    assert r.json() == {"recovered": 2, "remaining": 1}
    r = await world.cp.post(f"{SUBS}/ledger/recover", json=window)
    assert r.json() == {"recovered": 1, "remaining": 0}
    recovered = ["fb0", "fb1", "fb2"]
    await until(lambda: sorted(set(hook.ids("ledger")) & set(recovered)) == recovered, 30)
    await asyncio.sleep(QUIET_S)  # nothing else may come
    assert sorted(hook.ids("ledger")) == sorted([*recovered, "oka", "okb", "okc"])
    assert sorted(await _dlq_ids(world)) == ["fa0", "fa1", "fa2", "fc0", "fc1", "fc2"]
    ends = ("recovered", "attempted", "delivered")
    trace = await until(lambda: _traced(world, "fb1", "shop/ledger", *ends), 15)
    assert _of(trace, "shop/ledger")["state"] == "delivered"
    bad = await world.cp.post(f"{SUBS}/ledger/recover", json={"since": edges[2], "until": edges[1]})
    assert bad.status_code == 422 and "until" in bad.json()["message"]

"""The message trace: audit events written to the audit topic reach the trace index through
the control plane's indexer within seconds, and ``GET …/messages/{id}`` answers where the
message is stored and, per subscription of its topic, its state and attempts; 404 for an id
never accepted; the group look-up; the index keeps an event once when it is read twice, and
prunes by time."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from control_plane.services.trace_view import message_trace
from core.audit import AuditEvent, AuditType
from reports.models import TraceEventRow
from reports.trace import SourcedEvent, TraceIndex
from segments.audit import AuditSink
from tests.support.control_plane import create_shop, embedded_control_plane
from tests.support.until import until

URL = "/v1/projects/shop/topics/orders"


def _event(kind: AuditType, mid: str, sub: str | None = None, **extra: Any) -> AuditEvent:
    return AuditEvent(
        type=kind,
        message_id=mid,
        project="shop",
        topic="orders",
        subscription=f"shop/{sub}" if sub else None,
        at_ms=int(time.time() * 1000),
        **extra,
    )


def _story() -> list[AuditEvent]:
    """m1: delivered to mailer after a 503, filtered for audit; m2: dead-lettered for
    mailer, nothing yet for audit; both of group g."""
    A, T = AuditType, "attempted"
    return [
        _event(
            A.ACCEPTED,
            "m1",
            segment=1,
            partition=0,
            position=7,
            size=11,
            group="g",
            headers={"x-group-id": "g", "x-region": "eu"},
        ),
        _event(A.ACCEPTED, "m2", segment=1, partition=0, position=8, size=12, group="g"),
        _event(A.FILTERED, "m1", "audit"),
        _event(
            AuditType(T),
            "m1",
            "mailer",
            attempt=1,
            status=503,
            error="HTTP 503: busy",
            latency_ms=12.5,
            answer="busy",
        ),
        _event(A.RETRIED, "m1", "mailer", attempt=1, status=503, level_ms=30_000),
        _event(AuditType(T), "m1", "mailer", attempt=2, status=204, latency_ms=3.0, answer="ok"),
        _event(A.DELIVERED, "m1", "mailer", attempt=2, status=204),
        _event(AuditType(T), "m2", "mailer", attempt=1, status=400, error="HTTP 400"),
        _event(A.DEAD_LETTERED, "m2", "mailer", attempt=1, status=400, error="HTTP 400"),
    ]


async def test_a_message_is_traced_within_seconds_of_its_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/reports.db"
    async with embedded_control_plane(tmp_path, database_url=url) as cp:
        await create_shop(cp.client)
        for name in ("mailer", "audit"):
            body = {"name": name, "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/"}}
            r = await cp.client.post("/v1/projects/shop/subscriptions", json=body)
            assert r.status_code == 201, r.text
        async with AuditSink(cp.store, "httpbus.audit", flush_interval_s=0.05) as sink:
            for event in _story():
                sink.emit(event)
        started = time.monotonic()

        async def traced() -> dict[str, Any] | None:
            r = await cp.client.get(f"{URL}/messages/m2")
            return (
                r.json()
                if r.status_code == 200 and r.json()["subscriptions"][1]["events"]
                else None
            )

        m2 = await until(traced, 5, "m2 traced")
        print(f"\ntraced {time.monotonic() - started:.2f} s after the events were written")
        m1 = (await cp.client.get(f"{URL}/messages/m1")).json()
        missing = await cp.client.get(f"{URL}/messages/never")
        group = (await cp.client.get(f"{URL}/groups/g/messages", params={"limit": 1})).json()
    assert m1["stored"] == {
        "segment": 1,
        "partition": 0,
        "position": 7,
        "accepted_at": m1["stored"]["accepted_at"],
        "size": 11,
        "group": "g",
        "headers": {"x-group-id": "g", "x-region": "eu"},
    }
    states = {s["subscription"]: s for s in m1["subscriptions"]}
    assert states["shop/audit"]["state"] == "filtered"
    mailer = states["shop/mailer"]
    assert mailer["state"] == "delivered"
    assert [
        (a["attempt"], a["status"], a["latency_ms"], a["answer"], a["waited_in_level_ms"])
        for a in mailer["attempts"]
    ] == [(1, 503, 12.5, "busy", None), (2, 204, 3.0, "ok", 30_000)]
    assert mailer["events"][1]["level_ms"] == 30_000
    assert [e["type"] for e in mailer["events"]] == [
        "attempted",
        "retried",
        "attempted",
        "delivered",
    ]
    states = {s["subscription"]: s["state"] for s in m2["subscriptions"]}
    assert states == {"shop/audit": "pending", "shop/mailer": "dead_lettered"}
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert [m["message_id"] for m in group["messages"]] == ["m2"]


def test_the_index_keeps_an_event_read_twice_once_and_prunes_by_time(tmp_path: Path) -> None:
    from reports import migrate

    url = f"sqlite:///{tmp_path}/r.db"
    migrate.upgrade(url)
    index = TraceIndex.from_url(url)
    try:
        old = _event(AuditType.ACCEPTED, "m1").model_copy(update={"at_ms": 1_000})
        new = _event(AuditType.DELIVERED, "m1", "mailer")
        batch = [SourcedEvent("0:5:0", old), SourcedEvent("0:5:1", new)]
        index.insert(batch)
        index.insert(batch)  # read again after a restart
        assert [r.type for r in index.message("shop", "orders", "m1")] == ["accepted", "delivered"]
        assert index.prune(before_ms=2_000) == 1
        assert [r.type for r in index.message("shop", "orders", "m1")] == ["delivered"]
    finally:
        index.close()


def test_a_copy_passed_over_after_a_migration_leaves_the_message_delivered() -> None:
    rows = [
        TraceEventRow(type="attempted", at_ms=1, status=200, segment=1, subscription="shop/s"),
        TraceEventRow(type="delivered", at_ms=2, segment=1, subscription="shop/s"),
        TraceEventRow(type="filtered", at_ms=3, segment=2, subscription="shop/s"),  # skip_ids
    ]
    sub = message_trace("shop", "orders", "m1", rows, ["shop/s"])["subscriptions"][0]
    assert sub["state"] == "delivered"
    assert [(e["type"]) for e in sub["events"]] == ["attempted", "delivered", "filtered"]
    filtered_only = message_trace("shop", "orders", "m2", rows[2:], ["shop/s"])
    assert filtered_only["subscriptions"][0]["state"] == "filtered"

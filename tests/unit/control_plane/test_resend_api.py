"""Resend on the embedded metastore and store: the message is found by its id in the trace
index, read back from its segment and appended to the replay topic of that one subscription,
marked as a resend (the worker's side: tests/unit/delivery_workers/test_resend_reader.py);
a subscription that had no internal topics gets them; every bad request is a clear 4xx. The
web UI's two forms on the subscription page do the same and say how it went."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.services.report_store import shared_store
from core.audit import AuditEvent, AuditType
from metastore.catalog import Catalog
from reports.trace import SourcedEvent, TraceIndex
from segments.protocol import Record
from segments.subscription import dlq
from segments.subscription.layout import load_layout
from segments.subscription.retry_meta import RetryMeta
from tests.support.control_plane import AUTH, ControlPlane, create_shop, embedded_control_plane
from tests.support.ui_pages import csrf, login

SUBS = "/v1/projects/shop/subscriptions"


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    url = f"sqlite:///{tmp_path / 'reports.db'}"
    async with embedded_control_plane(
        tmp_path, database_url=url, admin=False, base_url="http://testserver"
    ) as cp:
        cp.client.headers.update(AUTH)
        await create_shop(cp.client, partitions=2)
        for name in ("s1", "s2"):
            sub = {"name": name, "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/h"}}
            assert (await cp.client.post(SUBS, json=sub)).is_success
        yield cp


async def _stored(cp: ControlPlane, tmp_path: Path, mid: str, partition: int) -> int:
    """Store ``mid`` in the topic's segment as a producer does, and index its acceptance."""
    topic = await cp.catalog.get_topic("shop", "orders")
    segment = topic.segments[-1]
    headers = (("x-message-id", mid.encode()), ("x-a", b"1"))
    record = Record(value=b"payload-" + mid.encode(), headers=headers)
    produced = await cp.store.produce(segment.storage_topic, record, partition=partition)
    accepted = AuditEvent(
        type=AuditType.ACCEPTED,
        message_id=mid,
        project="shop",
        topic="orders",
        segment=segment.id,
        partition=partition,
        position=produced.position,
        at_ms=int(time.time() * 1000),
    )
    index = TraceIndex(shared_store(f"sqlite:///{tmp_path / 'reports.db'}").engine)
    index.insert([SourcedEvent(f"0:{produced.position}:{partition}", accepted)])
    return produced.position


async def test_a_resend_goes_to_the_replay_topic_of_one_subscription(
    cp: ControlPlane, tmp_path: Path
) -> None:
    await _stored(cp, tmp_path, "m0", 0)
    position = await _stored(cp, tmp_path, "m1", 1)
    r = await cp.client.post(f"{SUBS}/s1/resend", json={"message_id": "m1"})
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["subscription"] == "shop/s1" and body["message_id"] == "m1"
    assert (body["partition"], body["position"]) == (1, position)
    assert body["trace"] == "/v1/projects/shop/topics/orders/messages/m1"
    catalog = Catalog(cp.meta)
    layout = await load_layout(cp.meta, await catalog.get_subscription("shop", "s1"))
    assert layout is not None  # made for the resend: s1 never needed its internal topics
    replay = await dlq.read_all(cp.store, layout.replay)
    assert [m.value for m in replay] == [b"payload-m1"]
    assert dlq.replay_kind(replay[0]) == dlq.RESEND
    meta = RetryMeta.of(replay[0].headers)
    assert (meta.origin, meta.topic, meta.attempts) == (f"1:1:{position}", "shop/orders", 0)
    assert dict(replay[0].headers)["x-a"] == b"1"
    # No other subscription of the topic sees anything.
    assert await load_layout(cp.meta, await catalog.get_subscription("shop", "s2")) is None
    assert await cp.meta.get("/seeks/shop:s1") is None  # the step-aside is over


async def test_bad_resends_are_clear(cp: ControlPlane, tmp_path: Path) -> None:
    cases = [
        (f"{SUBS}/s1/resend", {"message_id": "nope"}, 404, "trace index"),
        (f"{SUBS}/s9/resend", {"message_id": "m1"}, 404, "s9"),
        (f"{SUBS}/s1/resend", {"message_id": ""}, 422, "message_id"),
        (f"{SUBS}/s1/resend", {}, 422, "message_id"),
        (f"{SUBS}/s1/resend", {"message_id": "m", "x": 1}, 422, "x"),
    ]
    for url, body, status, words in cases:
        answer = await cp.client.post(url, json=body)
        assert answer.status_code == status, answer.text
        assert words in answer.json()["message"] and answer.json()["code"]


async def test_the_ui_resends_and_recovers(cp: ControlPlane, tmp_path: Path) -> None:
    await _stored(cp, tmp_path, "m1", 0)
    ui = cp.client
    del ui.headers["Authorization"]  # the browser has a session, not the token
    await login(ui)
    page = "/ui/projects/shop/subscriptions/s1"
    token = await csrf(ui, page)
    r = await ui.post(f"{page}/resend", data={"csrf": token, "message_id": "m1"})
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/projects/shop/topics/orders/messages/m1"
    shown = await ui.get(r.headers["location"])
    assert shown.status_code == 200 and "m1 resent to shop/s1 only" in shown.text
    r = await ui.post(
        f"{page}/resend", data={"csrf": token, "message_id": "zz"}, follow_redirects=True
    )
    assert "zz not resent: message zz of shop/orders is not in the trace index" in r.text
    window = {"since": "2026-01-01T00:00", "until": "2026-01-02T00:00"}
    r = await ui.post(f"{page}/recover", data={"csrf": token, **window}, follow_redirects=True)
    assert "recovered 0 dead-lettered messages that failed between 2026-01-01T00:00:00Z" in r.text
    backwards = {"since": window["until"], "until": window["since"]}
    r = await ui.post(f"{page}/recover", data={"csrf": token, **backwards}, follow_redirects=True)
    assert "nothing recovered: until" in r.text and "must come after" in r.text
    r = await ui.post(f"{page}/recover", data={"csrf": token, "since": ""}, follow_redirects=True)
    assert "give both times" in r.text

"""Honest numbers (issue 39 item 2) with a real Worker on the embedded backends: a grouped
topic whose endpoint always answers 500. Only the groups' heads are ever attempted; the
followers read meanwhile follow them into the DLQ, sidelined, and the open circuit stops
the reading, so the rest waits as lag. The status must say so, every message accounted for:
the DLQ's size as stored, its failed heads and sidelined followers, the lag, the open
circuit, failures by status and the endpoint's last answer; and the subscription page and
the DLQ page show them (heads first, grouped by error)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.envelope import GROUP_ID, MESSAGE_ID, encode
from segments.protocol import Record
from tests.support.control_plane import ControlPlane, embedded_control_plane
from tests.support.hook import Hook, serve_hook
from tests.support.ui_pages import login
from tests.support.until import until
from tests.support.workers import worker_in_process

SUB = "/v1/projects/shop/subscriptions/grouped"
GROUPS, PER_GROUP = 4, 10
ANSWER = b"database on fire"
SIDELINED_TITLE = "in the DLQ behind their group's failed head, never attempted"


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[tuple[ControlPlane, Hook]]:
    async with _world(tmp_path) as found:
        yield found


@asynccontextmanager
async def _world(tmp_path: Path, shards: int = 1) -> AsyncIterator[tuple[ControlPlane, Hook]]:
    async with (
        serve_hook(behaviour=lambda mid, n: (500, {}), answer=lambda p, b: ANSWER) as hook,
        embedded_control_plane(tmp_path, assign_interval_s=0.2) as cp,
    ):
        client = cp.client
        assert (await client.post("/v1/projects", json={"name": "shop"})).status_code == 201
        topic = {"name": "orders", "partitions": 1, "grouped": True}
        r = await client.post("/v1/projects/shop/topics", json=topic)
        assert r.status_code == 201, r.text
        storage = r.json()["segments"][0]["storage_topic"]
        sub = {
            "name": "grouped",
            "topic": "orders",
            "endpoint": {"url": hook.url},
            "retry": {"max_attempts": 2, "backoff": "fixed", "initial_delay_ms": 50},
            # The default min_calls (20) and window: the heads' few attempts (8) alone would
            # never open it; the followers sidelined behind them do (issue 39).
            "circuit_breaker": {"cooldown_seconds": 600},
            "shards": shards,
        }
        r = await client.post("/v1/projects/shop/subscriptions", json=sub)
        assert r.status_code == 201, r.text
        options = {"commit_every_s": 0.1, "lock_retry_s": 0.1, "status_interval_s": 0.2}
        async with worker_in_process(cp.meta, {"embedded": cp.store}, "w1", **options):
            for i in range(GROUPS * PER_GROUP):
                headers = ((MESSAGE_ID, encode(f"m{i}")), (GROUP_ID, encode(f"g{i % GROUPS}")))
                await cp.store.produce(storage, Record(b'{"n": %d}' % i, None, headers))
            yield cp, hook


SEEN: list[Any] = []


async def _status(client: httpx.AsyncClient) -> dict[str, Any] | None:
    r = await client.get(f"{SUB}/status")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    dlq = body["dlq"] or {}
    SEEN[:] = [dlq, body["totals"], body["circuit"], body["lag"]]
    settled = (
        (body["circuit"] or {}).get("state") == "open"
        and dlq.get("failed_heads") == GROUPS
        and dlq.get("sidelined", 0) >= 1
        and dlq["size"] + body["lag"] == GROUPS * PER_GROUP  # each one in the DLQ or behind
    )
    return body if settled else None


async def test_a_grouped_always_failing_subscription_says_what_its_dlq_holds(
    world: tuple[ControlPlane, Hook],
) -> None:
    cp, hook = world
    try:
        status = await until(lambda: _status(cp.client), 60, "every message accounted for", 0.25)
    except AssertionError:
        raise AssertionError(f"last seen: {SEEN}") from None
    size, sidelined = status["dlq"]["size"], status["dlq"]["sidelined"]
    assert size == GROUPS + sidelined
    assert set(status["failures"]) == {"500"} and status["failures"]["500"] >= GROUPS
    assert status["last_failure"]["status"] == 500
    assert status["last_failure"]["answer"] == ANSWER.decode()
    assert (status["dlq"]["counted_by"], status["dlq"]["live"]) == ("worker", True)
    attempted = {r.id for r in hook.requests}
    assert len(attempted) == GROUPS  # only the heads were ever sent

    r = await cp.client.get(f"{SUB}/dlq/messages", params={"kind": "heads", "limit": 500})
    assert len(r.json()["messages"]) == GROUPS
    r = await cp.client.get(f"{SUB}/dlq/messages/summary")
    assert (r.json()["size"], r.json()["sidelined"]) == (size, sidelined)  # as stored
    heads = {g["sidelined"]: g for g in r.json()["by_error"]}
    assert heads[False]["status"] == 500 and heads[False]["count"] == GROUPS
    assert heads[True]["count"] == sidelined
    r = await cp.client.get("/v1/projects/shop/subscriptions")
    (row,) = r.json()["items"]
    assert row["circuit"] == "open" and row["last_failure"]["status"] == 500
    assert (row["dlq"]["size"], row["dlq"]["sidelined"]) == (size, sidelined)

    assert cp.app is not None
    transport = httpx.ASGITransport(app=cp.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as browser:
        await login(browser)
        page = (await browser.get("/ui/projects/shop/subscriptions/grouped")).text
        assert f'data-k="dlq.size">{size}</a>' in page
        assert f'data-k="dlq.sidelined" id="dlq-sidelined" title="{SIDELINED_TITLE}">' in page
        assert f'title="{SIDELINED_TITLE}">{sidelined}</dd>' in page
        assert f'id="lag">{status["lag"]}</dd>' in page
        assert ">circuit open</span>" in page and ANSWER.decode() in page
        assert 'id="lag-chart"' in page and 'id="failures"' in page
        url = "/ui/projects/shop/subscriptions/grouped"
        short = await browser.get(url, params={"range": "10m"})
        assert short.status_code == 200 and "Lag over the last 10 minutes" in short.text
        dlq = (await browser.get("/ui/projects/shop/subscriptions/grouped/dlq")).text
        assert dlq.index('id="dlq-actions"') < dlq.index('id="dlq"')  # actions at the top
        assert dlq.index('<table class="list" id="dlq"') < dlq.index(
            '<table class="list" id="dlq-sidelined"'
        )
        assert f'<strong id="dlq-total-sidelined">{sidelined}<' in dlq
        assert 'class="payload"' in dlq and 'id="dlq-by-error"' in dlq
        # the list and the home page: the circuit and what the DLQ holds, as counted
        listing = (await browser.get("/ui/projects/shop/subscriptions")).text
        assert ">circuit open</span>" in listing
        assert f'<span class="dlq-size">{size}</span>' in listing
        assert f'<span class="dlq-sidelined">{sidelined}</span> sidelined' in listing
        assert 'class="wrap last-error"' in listing and "HTTP 500" in listing
        home = (await browser.get("/ui/")).text
        failing = home.split('<section id="failing">')[1].split("</section>")[0]
        assert "circuit open" in failing and "HTTP 500" in failing
        assert f'<span class="dlq-size">{size}</span>' in failing
        assert f'<span class="dlq-sidelined">{sidelined}</span>' in failing

    # A purge and an unsideline by the control plane: the worker's DLQ tail reads the
    # removal each appends, and its count (the status, the list) follows with no scan.
    left = size
    for group, act in (("g0", "purge"), ("g1", "unsideline")):
        r = await cp.client.get(f"{SUB}/dlq/messages", params={"group": group, "limit": 500})
        n = len(r.json()["messages"])
        if act == "purge":
            r = await cp.client.request("DELETE", f"{SUB}/dlq/messages", params={"group_id": group})
            assert r.json()["purged"] == n, r.text
        else:
            r = await cp.client.post(f"{SUB}/dlq/messages/unsideline", json={"group_ids": [group]})
            assert r.json()["unsidelined"] == n, r.text
        left -= n
        await until(partial(_counted, cp.client, left), 15, f"the {act} counted", 0.1)
    r = await cp.client.get(f"{SUB}/dlq/messages/summary")
    assert r.json()["size"] == left
    r = await cp.client.get("/v1/projects/shop/subscriptions")
    assert r.json()["items"][0]["dlq"]["size"] == left

    # Paused, no runner runs it: the worker still follows its DLQ, so a purge meanwhile is
    # counted too (the list shows it; the status needs no scan).
    assert (await cp.client.post(f"{SUB}/stop")).status_code == 200
    r = await cp.client.request("DELETE", f"{SUB}/dlq/messages", params={"group_id": "g2"})
    left -= r.json()["purged"]
    dlq = await until(partial(_counted, cp.client, left), 15, "the purge counted paused", 0.1)
    assert dlq["live"] is True
    r = await cp.client.get("/v1/projects/shop/subscriptions")
    assert r.json()["items"][0]["dlq"]["size"] == left


async def _counted(client: httpx.AsyncClient, size: int) -> dict[str, Any] | None:
    """The status once the worker's live count says ``size``."""
    dlq = (await client.get(f"{SUB}/status")).json()["dlq"] or {}
    return dlq if dlq.get("size") == size and dlq.get("counted_by") == "worker" else None


async def test_a_sharded_subscriptions_dlq_count_adds_up_its_shards(tmp_path: Path) -> None:
    """Two shards, each counting the entries of its own groups: the status and the list
    show their sum, which is what the DLQ holds."""
    async with _world(tmp_path, shards=2) as (cp, _):

        async def counted() -> dict[str, Any] | None:
            status = (await cp.client.get(f"{SUB}/status")).json()
            dlq = status["dlq"] or {}
            stored = (await cp.client.get(f"{SUB}/dlq/messages/summary")).json()
            done = (
                dlq.get("counted_by") == "worker"
                and dlq.get("failed_heads") == GROUPS
                and (dlq["size"], dlq["sidelined"]) == (stored["size"], stored["sidelined"])
                and len(status.get("shards", [])) == 2
            )
            return dlq if done else None

        dlq = await until(counted, 60, "both shards' counts adding up to the DLQ", 0.25)
        (row,) = (await cp.client.get("/v1/projects/shop/subscriptions")).json()["items"]
        assert row["dlq"]["size"] == dlq["size"] >= GROUPS


async def test_a_subscription_no_worker_counts_has_its_dlq_read_from_storage(
    tmp_path: Path,
) -> None:
    """Unassigned: no count is published, so its status reads the DLQ (once, this one
    subscription) and the list, which reads none, says nothing rather than zero."""
    async with embedded_control_plane(tmp_path) as cp:
        client = cp.client
        assert (await client.post("/v1/projects", json={"name": "shop"})).status_code == 201
        topic = {"name": "orders", "partitions": 1, "grouped": True}
        assert (await client.post("/v1/projects/shop/topics", json=topic)).status_code == 201
        sub = {"name": "grouped", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/"}}
        assert (await client.post("/v1/projects/shop/subscriptions", json=sub)).status_code == 201
        status = (await client.get(f"{SUB}/status")).json()
        assert status["state"] == "unassigned"
        assert status["dlq"] == {
            "size": 0,
            "failed_heads": 0,
            "sidelined": 0,
            "counted_by": "storage",
            "live": True,
        }
        (row,) = (await client.get("/v1/projects/shop/subscriptions")).json()["items"]
        assert row["dlq"] is None and row["circuit"] is None

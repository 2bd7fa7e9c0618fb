"""The on-call console in real Chromium against a running ``httpbus dev`` (its worker, control
plane and producer processes on the embedded backends): the home page answers the five
on-call questions with no other click, and a grouped subscription whose endpoint always
answers 500 shows what its DLQ really holds.

What runs on what: the deliveries, the circuit, the DLQ, the disabling of an endpoint and
the figures are the real worker's (``httpbus dev``); the failover "in flight" is a record
this test writes into dev's metastore (a segment left unsealed on a cluster dev does not
have), because no real cluster can go down under ``httpbus dev``.
"""

from __future__ import annotations

import asyncio
import re
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from core.model import SegmentState
from metastore import paths
from metastore.catalog import Catalog
from metastore.embedded import EmbeddedMetaStore
from tests.support.dev import Dev, run_dev
from tests.support.ui import AUTH, TOKEN, Hook, admin, hook, log_in, needs_chromium, shot
from tests.support.until import until_sync

pytestmark = needs_chromium
GROUPS, PER_GROUP = 4, 10


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ui-overview")


@pytest.fixture(scope="module")
def dev(data: Path) -> Iterator[Dev]:
    with run_dev(data, TOKEN) as running:
        yield running


@pytest.fixture(scope="module")
def failing(dev: Dev) -> Iterator[Hook]:
    """An endpoint that answers 500 to everything."""
    with hook() as endpoint:
        endpoint.status = 500
        yield endpoint


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port  # nothing listens on it once closed: every attempt is refused


def _create(api: httpx.Client, url: str, body: dict[str, Any]) -> None:
    r = api.post(url, json=body)
    assert r.status_code == 201, r.text


async def _left_unsealed(data: Path) -> None:
    """Topic shop/archive's segment as a failover leaves it (see the module doc)."""
    async with EmbeddedMetaStore(str(data / "state" / "metastore.db")) as meta:
        catalog = Catalog(meta)
        segment = await catalog.get_segment("shop", "archive", 1)
        away = {"state": SegmentState.UNSEALED, "cluster": "kafka-away"}
        await catalog.update_segment("shop", "archive", segment.model_copy(update=away))
        await meta.create(paths.unsealed_segment("shop", "archive", 1), b"")


@pytest.fixture(scope="module")
def healthy(dev: Dev) -> Iterator[Hook]:
    with hook() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def world(dev: Dev, data: Path, failing: Hook, healthy: Hook) -> dict[str, Any]:
    """shop/orders (grouped) with ``grouped`` (its endpoint answers 500), ``off`` (its
    endpoint refuses connections; disabled after 2 s of failing) and ``slow`` (a healthy
    endpoint, limited to 0.5 deliveries a second: it lags), 40 messages in 4 groups;
    shop/archive left unsealed by a "failover". Returns the overview once it says it all.
    (``grouped`` reads all 40 before its circuit opens, so it has no lag: its followers
    are all sidelined into the DLQ, the issue's case.)"""
    with admin(dev) as api:
        _create(api, "/v1/projects", {"name": "shop"})
        topic = {"name": "orders", "partitions": 1, "grouped": True}
        _create(api, "/v1/projects/shop/topics", topic)
        _create(api, "/v1/projects/shop/topics", {"name": "archive", "partitions": 1})
        grouped = {
            "name": "grouped",
            "topic": "orders",
            "endpoint": {"url": failing.url},
            "retry": {"max_attempts": 2, "backoff": "fixed", "initial_delay_ms": 50},
            "circuit_breaker": {"min_calls": 2, "cooldown_seconds": 600},
        }
        _create(api, "/v1/projects/shop/subscriptions", grouped)
        off = {
            "name": "off",
            "topic": "orders",
            "endpoint": {"url": f"http://127.0.0.1:{_closed_port()}/h", "disable_after_s": 2},
            "retry": {"max_attempts": 100, "backoff": "fixed", "initial_delay_ms": 200},
        }
        _create(api, "/v1/projects/shop/subscriptions", off)
        slow = {
            "name": "slow",
            "topic": "orders",
            "endpoint": {"url": healthy.url},
            "rate_limit_per_second": 0.5,
            "circuit_breaker": {"enabled": False},
        }
        _create(api, "/v1/projects/shop/subscriptions", slow)
        url = f"{dev.producer}/v1/projects/shop/topics/orders/produce"
        with httpx.Client(headers=AUTH, timeout=15) as producer:
            for i in range(GROUPS * PER_GROUP):
                headers = {"X-Group-Id": f"g{i % GROUPS}", "X-Message-Id": f"m{i}"}
                r = producer.post(url, content=b'{"n": %d}' % i, headers=headers)
                assert r.status_code == 201, r.text
        # Playwright's sync API runs a loop in this thread: the metastore gets one of its own.
        with ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, _left_unsealed(data)).result(timeout=30)

        last: list[Any] = []

        def said() -> dict[str, Any] | None:
            seen: dict[str, Any] = api.get("/v1/overview").json()
            last[:] = [seen]
            names = {k: [r["subscription"] for r in seen[k]] for k in ("failing", "lag")}
            growing = [r["subscription"] for r in seen["dlq_growing"]]
            disabled = [r["subscription"] for r in seen["disabled"]]
            ok = (
                "grouped" in names["failing"]
                and "slow" in names["lag"]
                and "grouped" in growing
                and disabled == ["off"]
                and seen["in_flight"]["failovers"]
            )
            return seen if ok else None

        try:
            found: dict[str, Any] = until_sync(said, 90, "the overview saying it all", 0.5)
        except AssertionError:
            seen = {k: v for k, v in last[0].items() if k != "history"} if last else None
            status = api.get("/v1/projects/shop/subscriptions/grouped/status").json()
            status.pop("history")
            raise AssertionError(f"the overview said {seen}; the status {status}") from None
        return found


def test_the_home_page_answers_the_five_questions(
    page: Page, dev: Dev, world: dict[str, Any]
) -> None:
    log_in(page, dev, "/ui/")
    failing = page.locator("#failing")
    expect(failing).to_contain_text("shop/grouped")
    expect(failing).to_contain_text("circuit open")
    expect(failing).to_contain_text("HTTP 500")
    expect(page.locator("#lag")).to_contain_text("shop/slow")
    expect(page.locator("#lag-chart")).to_be_visible()
    expect(page.locator("#dlq-growing")).to_contain_text("shop/grouped")
    expect(page.locator("#disabled")).to_contain_text("shop/off")
    moving = page.locator("#moving")
    expect(moving).to_contain_text("failover of shop/archive")
    expect(page.locator("#hour-chart")).to_be_visible()
    shot(page, "16-overview")
    # each answer is a link to its page
    page.locator("#failing a", has_text="shop/grouped").first.click()
    expect(page).to_have_url(re.compile(r"/ui/projects/shop/subscriptions/grouped$"))


def test_the_always_failing_grouped_subscription_says_what_its_dlq_holds(
    page: Page, dev: Dev, world: dict[str, Any]
) -> None:
    summary = "/v1/projects/shop/subscriptions/grouped/dlq/messages/summary"
    with admin(dev) as api:

        def settled() -> dict[str, Any] | None:
            status = api.get("/v1/projects/shop/subscriptions/grouped/status").json()
            dlq = status["dlq"] or {}
            done = dlq.get("failed_heads") == GROUPS and dlq["size"] + status["lag"] == 40
            # (its reader may have read all 40 before the circuit opened: then lag is 0)
            return status if done and dlq.get("sidelined") else None

        status = until_sync(settled, 60, "every message in the DLQ or behind it", 0.5)
        held = api.get(summary).json()
    assert held["size"] == status["dlq"]["size"] and held["failed_heads"] == GROUPS
    log_in(page, dev, "/ui/projects/shop/subscriptions/grouped")
    expect(page.locator("#dlq-size")).to_have_text(str(held["size"]))
    expect(page.locator("#dlq-sidelined")).to_have_text(str(held["sidelined"]))
    expect(page.locator("#dlq-heads")).to_have_text(str(GROUPS))
    expect(page.locator("#circuit")).to_have_text("open")
    expect(page.locator("#sub-state")).to_contain_text("circuit open")
    expect(page.locator("#last-failure")).to_contain_text("HTTP 500")
    expect(page.locator("#failures")).to_contain_text("500")
    expect(page.locator("#lag-chart")).to_be_visible()
    shot(page, "17-honest-numbers")
    page.click("#dlq-size a")
    expect(page.locator("#dlq-total")).to_have_text(str(held["size"]))
    expect(page.locator("#dlq-by-error")).to_contain_text("HTTP 500")
    expect(page.locator("#dlq tbody tr")).to_have_count(GROUPS)  # the failed heads first
    expect(page.locator("#dlq-sidelined")).to_be_visible()
    shot(page, "18-dlq-by-error")

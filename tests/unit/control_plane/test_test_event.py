"""Send a test event (``POST …/subscriptions/{s}/test-event``, issue 40) on the embedded
backends: the control plane asks, the worker holding the subscription sends it through its
delivery sender, and the endpoint double verifies the Standard Webhooks signature."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.services.sample_events import SampleEvents
from core.errors import NotReady
from core.model import Endpoint
from metastore import paths
from metastore.catalog import Catalog
from metastore.config import EmbeddedMetaStoreConfig, open_metastore
from tests.support.cli import httpbus as run
from tests.support.cli import ok
from tests.support.contract_api import fake_app, served
from tests.support.control_plane import embedded_control_plane, json_of
from tests.support.hook import SECRET, Hook, serve_hook
from tests.support.ui_pages import TOKEN, csrf, login
from tests.support.workers import worker_in_process
from tests.support.world import catalog_with_t, segment, subscription

SUBS = "/v1/projects/shop/subscriptions"
PAGE = "/ui/projects/shop/subscriptions"


@dataclass
class Env:
    client: httpx.AsyncClient
    catalog: Catalog
    hook: Hook

    async def test_event(self, name: str = "s") -> dict[str, Any]:
        return json_of(await self.client.post(f"{SUBS}/{name}/test-event"))


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    async with (
        serve_hook(secret=SECRET) as hook,
        embedded_control_plane(tmp_path, assign_interval_s=0.2) as cp,
    ):
        await cp.client.post("/v1/projects", json={"name": "shop"})
        await cp.client.post("/v1/projects/shop/topics", json={"name": "orders"})
        body = {
            "name": "s",
            "topic": "orders",
            "endpoint": {"url": hook.url_for("s")},
            "signing_secret": SECRET,
        }
        assert (await cp.client.post(SUBS, json=body)).status_code == 201
        options = {"lock_retry_s": 0.1, "status_interval_s": 0.2}
        async with worker_in_process(cp.meta, {"embedded": cp.store}, "w1", **options):
            yield Env(cp.client, cp.catalog, hook)


async def test_a_test_event_is_signed_as_a_delivery_and_marked(env: Env) -> None:
    env.hook.behaviour = lambda mid, n: (200, {})
    env.hook.answer = lambda path, body: b"receiver says hello " + b"x" * 5_000
    result = await env.test_event()
    assert result["delivered"] is True and result["status"] == 200 and result["worker"] == "w1"
    assert result["latency_ms"] > 0
    assert result["answer"].startswith("receiver says hello") and len(result["answer"]) <= 1_000
    [request] = env.hook.requests
    assert env.hook.bad_signatures == 0  # verified with the subscription's secret
    headers = request.headers
    assert headers["X-Test"] == "true" and headers["X-Attempt"] == "1"
    assert headers["X-Message-Id"] == headers["webhook-id"] == result["message_id"]
    assert result["message_id"].startswith("test_") and headers["X-Topic"] == "shop/orders"
    assert headers["Content-Type"] == "application/json"
    event = json.loads(request.body)
    assert event["type"] == "httpbus.test" and event["subscription"] == "shop/s"


async def test_a_failing_endpoint_and_a_paused_subscription_answer_too(env: Env) -> None:
    env.hook.down.add("s")
    r = await env.client.post(f"{SUBS}/s/stop")
    assert r.status_code == 200
    result = await env.test_event()
    assert result["delivered"] is False and result["status"] == 503
    assert "503" in result["error"]
    env.hook.down.clear()
    assert (await env.test_event())["delivered"] is True  # one at a time, one after another


async def test_an_unknown_subscription_is_404(env: Env) -> None:
    r = await env.client.post(f"{SUBS}/nope/test-event")
    assert r.status_code == 404, r.text


async def test_without_a_worker_the_asker_gives_up_and_leaves_nothing(tmp_path: Path) -> None:
    async with open_metastore(EmbeddedMetaStoreConfig(path=str(tmp_path / "m.db"))) as meta:
        catalog = await catalog_with_t(meta, segment("embedded"))
        quick = Endpoint(url="http://127.0.0.1:9/hook", timeout_ms=100)
        await catalog.create_subscription(subscription("s", endpoint=quick))
        events = SampleEvents(catalog, "cp-test", worker_wait_s=0.2)
        with pytest.raises(NotReady) as refused:
            await events.send("p", "s")
        assert "no worker answered" in refused.value.message
        assert await meta.get(paths.test_event("p", "s")) is None


async def test_the_page_s_button_sends_it_and_shows_the_answer(tmp_path: Path) -> None:
    api = {"Authorization": f"Bearer {TOKEN}"}
    async with (
        serve_hook(secret=SECRET) as hook,
        embedded_control_plane(
            tmp_path, admin=False, base_url="http://testserver", assign_interval_s=0.2
        ) as cp,
        worker_in_process(cp.meta, {"embedded": cp.store}, "w1", lock_retry_s=0.1),
    ):
        browser = cp.client
        await browser.post("/v1/projects", json={"name": "shop"}, headers=api)
        await browser.post("/v1/projects/shop/topics", json={"name": "orders"}, headers=api)
        sub = {"name": "s1", "topic": "orders", "endpoint": {"url": hook.url_for("s1")}}
        r = await browser.post(SUBS, json=sub | {"signing_secret": SECRET}, headers=api)
        assert r.status_code == 201, r.text
        hook.behaviour = lambda mid, n: (202, {})
        hook.answer = lambda path, body: b"queued"
        await login(browser)
        page = await browser.get(f"{PAGE}/s1")
        assert 'id="test-event"' in page.text and " onclick" not in page.text
        token = await csrf(browser, f"{PAGE}/s1")
        r = await browser.post(f"{PAGE}/s1/test-event", data={"csrf": token})
        assert r.status_code == 303, r.text
        page = await browser.get(f"{PAGE}/s1")
        assert "test event delivered: HTTP 202 in" in page.text and "answer: queued" in page.text
        assert [r.headers["X-Test"] for r in hook.requests] == ["true"]
        assert hook.bad_signatures == 0


def test_the_cli_prints_the_endpoint_s_answer() -> None:
    app = fake_app()
    asked: list[str] = []

    @app.post("/v1/projects/{p}/subscriptions/{s}/test-event")
    def test_event(p: str, s: str) -> Any:
        asked.append(f"{p}/{s}")
        return {
            "message_id": "test_0f",
            "delivered": False,
            "status": 401,
            "latency_ms": 12.5,
            "error": "HTTP 401",
            "answer": "bad signature",
            "worker": "w1",
        }

    with served(app) as url:
        out = ok(run(url, "sub", "test-event", "shop", "s1"))
    assert "test event test_0f: failed, HTTP 401 in 12.5 ms (sent by w1)" in out
    assert "answer: bad signature" in out and asked == ["shop/s1"]

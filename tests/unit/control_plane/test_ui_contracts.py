"""The UI's pages for the APIs other branches build (status, stop/start, seek, DLQ, cutover,
audit), against a fake app that answers their contract shapes, and against a control plane
without them: each page shows the data, or says "not available" — never a crash."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from control_plane import ui
from reports import migrate
from tests.support.contract_api import bare_app, dlq_message, fake_app
from tests.support.reports import sample_hour, seed_reports
from tests.support.ui_pages import TOKEN, csrf, login

SUB = "/ui/projects/shop/subscriptions/s1"


async def _client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    ui.install(app, TOKEN, ["embedded", "pulsar-main"], "embedded")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        await login(client)
        yield client


@pytest.fixture
async def fake() -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    app = fake_app()
    async for client in _client(app):
        yield client, app


@pytest.fixture
async def bare() -> AsyncIterator[httpx.AsyncClient]:
    async for client in _client(bare_app()):
        yield client


def _figure(html: str, key: str) -> str:
    found = re.search(rf'data-k="{re.escape(key)}"[^>]*>([^<]*)<', html)
    assert found, key
    return found.group(1)


async def test_status_page_shows_figures_chart_data_and_rising_counts(
    fake: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, _ = fake
    page = await client.get(SUB)
    assert page.status_code == 200
    assert _figure(page.text, "circuit") == "open" and _figure(page.text, "lag") == "4"
    assert _figure(page.text, "in_flight") == "2"
    first = int(_figure(page.text, "totals.delivered"))
    data = re.search(
        r'<script type="application/json" id="status-data">(.*?)</script>', page.text, re.S
    )
    assert data and len(json.loads(data.group(1))["history"]) == 360  # the chart's hour
    assert "uPlot.iife.min.js" in page.text
    polled = (await client.get(f"{SUB}/status.json")).json()
    assert polled["totals"]["delivered"] > first
    vendored = await client.get("/ui/static/vendor/uplot/uPlot.iife.min.js")
    assert vendored.status_code == 200 and len(vendored.content) > 40_000


async def test_pause_resume_use_stop_and_start_and_seek_posts_the_contract_body(
    fake: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = fake
    token = await csrf(client, SUB)
    await client.post(f"{SUB}/pause", data={"csrf": token})
    assert app.state.fake.paused is True
    await client.post(f"{SUB}/resume", data={"csrf": token})
    assert app.state.fake.paused is False
    r = await client.post(f"{SUB}/seek", data={"csrf": token, "to": "earliest"})
    assert "moved to segment 2" in (await client.get(r.headers["location"])).text
    await client.post(
        f"{SUB}/seek", data={"csrf": token, "to": "timestamp", "timestamp": "2026-01-31T12:00"}
    )
    assert app.state.fake.seeks == [{"to": "earliest"}, {"timestamp": "2026-01-31T12:00:00Z"}]


async def test_dlq_lists_unsidelines_and_purges_only_after_confirmation(
    fake: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = fake
    page = await client.get(f"{SUB}/dlq")
    assert page.status_code == 200 and page.text.count('name="message_id"') == 25
    assert "HTTP 500 from the endpoint" in page.text and '{"order": 1}' in page.text.replace(
        "&#34;", '"'
    )
    token = re.search(r'name="csrf" value="([^"]*)"', page.text).group(1)  # type: ignore[union-attr]
    form = {"csrf": token, "scope": "selected", "message_id": ["m000", "m001"]}
    r = await client.post(f"{SUB}/dlq/unsideline", data=form)
    assert "unsidelined 2 (0 remaining)" in (await client.get(r.headers["location"])).text
    assert len(app.state.fake.dlq) == 23

    r = await client.post(f"{SUB}/dlq/purge", data={"csrf": token, "scope": "all"})
    assert r.status_code == 200 and "Yes, purge" in r.text and "every message in the DLQ" in r.text
    assert len(app.state.fake.dlq) == 23  # nothing purged before the confirmation
    r = await client.post(
        f"{SUB}/dlq/purge", data={"csrf": token, "scope": "all", "confirm": "yes"}
    )
    assert "purged 23 (0 remaining)" in (await client.get(r.headers["location"])).text
    assert app.state.fake.dlq == []
    assert 'id="dlq-empty"' in (await client.get(f"{SUB}/dlq")).text


async def test_unsideline_everything_loops_on_remaining(
    fake: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = fake
    app.state.fake.dlq = [dlq_message(i) for i in range(2500)]  # 1 000 per call
    token = await csrf(client, f"{SUB}/dlq")
    r = await client.post(f"{SUB}/dlq/unsideline", data={"csrf": token, "scope": "all"})
    assert "unsidelined 2500 (0 remaining)" in (await client.get(r.headers["location"])).text


async def test_cutover_page_follows_the_phases_and_the_producer_acks(
    fake: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, app = fake
    base = "/ui/projects/shop/topics/orders/cutover"
    token = await csrf(client, "/ui/audit")
    form = {"csrf": token, "cluster": "pulsar-main", "partitions": "8"}
    # Not asked yet (a browser without script): the server asks, and starts nothing.
    asked = await client.post(base, data=form)
    assert asked.status_code == 200
    assert "Start a cutover of shop/orders to pulsar-main" in asked.text
    assert 'name="confirm" value="yes"' in asked.text and app.state.fake.cutover is None
    r = await client.post(base, data={**form, "confirm": "yes"})
    assert r.status_code == 303 and r.headers["location"] == base
    page = await client.get(base)
    assert 'data-live="' in page.text and "segment 1 → 2" in page.text
    phases = [re.search(r'data-phase="([A-Z_]+)"', page.text).group(1)]  # type: ignore[union-attr]
    for _ in range(10):
        live = (await client.get(f"{base}/live")).text
        phases.append(re.search(r'data-phase="([A-Z_]+)"', live).group(1))  # type: ignore[union-attr]
        if phases[-1] == "COMPLETE":
            break
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == [
        "PREPARE",
        "SWITCH",
        "COMMIT",
        "COMPLETE",
    ]
    assert live.count('class="ack"') == 6  # 2 producers × prepared, switched, committed
    again = await client.post(
        base, data={"csrf": token, "cluster": "embedded", "partitions": "1", "confirm": "yes"}
    )
    assert again.status_code == 303  # a finished cutover does not block the next one


def _reports(url: str) -> int:
    """The sample run and an hourly row (a failure rate of 1 in 3), through the report store."""
    migrate.upgrade(url)
    return seed_reports(url, [sample_hour(attempted=3)])


async def test_audit_reports_from_the_real_audit_api(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'reports.db'}"
    run_id = _reports(url)
    async for client in _client(fake_app(reports_url=url, admin_token=TOKEN)):
        page = await client.get("/ui/audit?project=shop")
        assert page.status_code == 200
        assert f'href="/ui/audit/runs/{run_id}"' in page.text
        assert "<th>p99 ms</th>" in page.text and "<td>41.5</td>" in page.text
        assert "<td>0.3333</td>" in page.text  # failure rate, 4 significant digits
        assert "1970-01-01 01:00:00" in page.text  # RFC 3339 shown to the second
        run = await client.get(f"/ui/audit/runs/{run_id}")
        assert "m-lost-1" in run.text and "duplicates (1)" in run.text and "lost (1)" in run.text
        assert (await client.get("/ui/audit/runs/999")).status_code == 404


async def test_an_unmigrated_report_database_is_said_in_its_section(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    async for client in _client(fake_app(reports_url=url, admin_token=TOKEN)):
        page = await client.get("/ui/audit")
        assert page.status_code == 200
        assert page.text.count("is it migrated? httpbus db upgrade") == 3
        assert "[SQL" not in page.text


async def test_without_those_apis_every_page_says_not_available(bare: httpx.AsyncClient) -> None:
    for url in (
        f"{SUB}/dlq",
        "/ui/projects/shop/topics/orders/cutover",
        "/ui/audit",
        "/ui/audit/runs/1",
    ):
        r = await bare.get(url)
        assert r.status_code == 200 and "not available" in r.text.lower(), url
    assert (await bare.get(f"{SUB}/status.json")).status_code == 404
    token = await csrf(bare, "/ui/audit")
    r = await bare.post(
        "/ui/projects/shop/topics/orders/cutover",
        data={"csrf": token, "cluster": "x", "partitions": "1", "confirm": "yes"},
    )
    assert "not available" in (await bare.get(r.headers["location"])).text


async def test_timeline_after_a_cutover_draws_two_segments_and_where_producers_write(
    fake: tuple[httpx.AsyncClient, FastAPI],
) -> None:
    client, _ = fake
    page = await client.get("/ui/projects/shop/topics/orders")
    assert page.status_code == 200
    svg = re.search(r'<svg id="timeline".*?</svg>', page.text, re.S)
    assert svg
    boxes = re.findall(r'<g class="segment" data-segment="(\d)">(.*?)</g>', svg.group(0), re.S)
    assert [b[0] for b in boxes] == ["1", "2"]
    assert "#1 kafka · sealed" in boxes[0][1] and "kafka-main · 4 partition(s)" in boxes[0][1]
    assert "until 2026-11-22 07:00" in boxes[0][1]
    assert "#2 pulsar · active" in boxes[1][1] and "until now" in boxes[1][1]
    assert "producers write here" in boxes[1][1] and "producers write here" not in boxes[0][1]
    assert svg.group(0).count("<line ") == 1  # one arrow from segment 1 to segment 2
    assert 'id="migrate"' in page.text  # this control plane runs cutovers: the form is offered

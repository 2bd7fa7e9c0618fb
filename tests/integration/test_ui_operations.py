"""What an operator watches and does, in real Chromium against a running ``httpbus dev`` with
the merged APIs: the delivered count rising live with the rate chart, the circuit opening
when the endpoint breaks, the DLQ filling (an endpoint answering 400), unsideline and purge,
a cutover run from the topic page with its phases and producer acks, then a timeline of two
segments, and the audit reports read from the relational store. Each test saves a screenshot
in docs/screenshots/ (the README's tour)."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from core.audit import Finding, FindingKind, HourlyRow, Reconciliation, SubscriptionTally
from reports import migrate
from reports.store import ReportStore
from tests.support.dev import Dev, run_dev
from tests.support.ui import TOKEN, Hook, admin, log_in, needs_chromium, publish, shot
from tests.support.until import until_sync

pytestmark = needs_chromium


@pytest.fixture(scope="module")
def reports_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('reports') / 'reports.db'}"
    migrate.upgrade(url)
    return url


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory, reports_url: str) -> Iterator[Dev]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HTTPBUS_DATABASE_URL", reports_url)  # the dev's report database
        with run_dev(tmp_path_factory.mktemp("ui-ops"), TOKEN) as running:
            yield running


def _topic_and_sub(dev: Dev, project: str, topic: str, sub: dict[str, object]) -> None:
    with admin(dev) as api:
        if api.get(f"/v1/projects/{project}").status_code == 404:
            assert api.post("/v1/projects", json={"name": project}).status_code == 201
        r = api.post(f"/v1/projects/{project}/topics", json={"name": topic, "partitions": 2})
        assert r.status_code == 201, r.text
        r = api.post(f"/v1/projects/{project}/subscriptions", json={"topic": topic, **sub})
        assert r.status_code == 201, r.text


def test_delivered_count_rises_live_and_the_rate_chart_draws_it(
    page: Page, dev: Dev, endpoint: Hook
) -> None:
    _topic_and_sub(dev, "shop", "orders", {"name": "mailer", "endpoint": {"url": endpoint.url}})
    log_in(page, dev, "/ui/projects/shop/subscriptions/mailer")
    delivered = page.locator("#delivered")
    expect(delivered).to_have_text("0")
    sent = [f'{{"order": {i}}}'.encode() for i in range(12)]
    publish(dev, "shop", "orders", sent)
    # No reload: the page polls the status API and redraws its figures and chart.
    expect(delivered).to_have_text("12", timeout=20_000)
    assert sorted(endpoint.delivered) == sorted(sent)
    chart = page.locator("#rates-chart")
    expect(chart.locator("canvas").first).to_be_visible()
    expect(chart).to_have_attribute("data-delivered", "12")
    expect(chart).to_contain_text("delivered/s")
    expect(page.locator('#status [data-k="state_detail"]')).to_have_text("running")
    expect(page.locator('#status [data-k="lag"]')).to_have_text("0")
    expect(page.locator('#status [data-k="circuit"]')).to_have_text("closed")
    shot(page, "07-status-chart")
    page.click("#pause-resume")
    expect(page.locator(".flash")).to_contain_text("paused")
    expect(page.locator('#status [data-k="state_detail"]')).to_have_text("paused")
    page.click("#pause-resume")
    expect(page.locator(".flash")).to_contain_text("resumed")


def test_circuit_opens_on_the_page_when_the_endpoint_breaks(
    page: Page, dev: Dev, endpoint: Hook
) -> None:
    breaker = {
        "min_calls": 5,
        "window_seconds": 10,
        "cooldown_seconds": 120,  # stays open while the test looks
        "probe_per_second": 1,
        "floor_per_second": 1,
    }
    sub = {
        "name": "billing",
        "endpoint": {"url": endpoint.url},
        "retry": {"max_attempts": 50, "backoff": "fixed", "initial_delay_ms": 200},
        "circuit_breaker": breaker,
    }
    _topic_and_sub(dev, "shop", "invoices", sub)
    endpoint.status = 503
    log_in(page, dev, "/ui/projects/shop/subscriptions/billing")
    publish(dev, "shop", "invoices", [f"invoice-{i}".encode() for i in range(10)])
    expect(page.locator('#status [data-k="circuit"]')).to_have_text("open", timeout=20_000)
    expect(page.locator("#rates-chart")).not_to_have_attribute("data-failed", "0")
    shot(page, "08-circuit-open")
    # Not "active" while the circuit is open: the page's state and the list's say so.
    page.reload()
    expect(page.locator("#sub-state")).to_have_text("circuit open")
    page.goto(f"{dev.control_plane}/ui/projects/shop/subscriptions")
    row = page.locator("#subscriptions tbody tr").filter(has_text="billing")
    expect(row.locator(".sub-state")).to_have_text("circuit open")
    with admin(dev) as api:  # no more probes of this endpoint for the rest of the module
        assert api.post("/v1/projects/shop/subscriptions/billing/stop").status_code == 200


def _dlq_size(dev: Dev, sub: str) -> int:
    with admin(dev) as api:
        r = api.get(f"/v1/projects/shop/subscriptions/{sub}/dlq/messages", params={"limit": 500})
        return len(r.json()["messages"])


def test_dlq_lists_failed_messages_unsideline_replays_them_and_purge_asks_first(
    page: Page, dev: Dev, endpoint: Hook
) -> None:
    _topic_and_sub(dev, "shop", "refunds", {"name": "ledger", "endpoint": {"url": endpoint.url}})
    endpoint.status = 400  # not retryable: straight to the DLQ
    refunds = [f"refund-{i}".encode() for i in range(5)]
    publish(dev, "shop", "refunds", refunds)
    until_sync(lambda: _dlq_size(dev, "ledger") == 5, 30, "5 messages in the DLQ")
    log_in(page, dev, "/ui/projects/shop/subscriptions/ledger/dlq")
    rows = page.locator("#dlq tbody tr")
    expect(rows).to_have_count(5)
    for body in refunds:
        expect(page.locator("#dlq")).to_contain_text(body.decode())
    expect(rows.first.locator("td").nth(3)).to_have_text("400")
    expect(rows.first.locator("td").nth(4)).to_contain_text("400")
    shot(page, "09-dlq")

    endpoint.status = 204  # the endpoint is fixed: replay
    page.check("#select-all")
    page.click("#unsideline")
    expect(page.locator(".flash")).to_contain_text("unsidelined 5 (0 remaining)")
    expect(page.locator("#dlq-empty")).to_be_visible()
    until_sync(lambda: sorted(endpoint.delivered) == sorted(refunds), 30, "the replay delivered")
    shot(page, "10-dlq-replayed")

    endpoint.status = 400
    publish(dev, "shop", "refunds", [b"refund-x", b"refund-y"])
    until_sync(lambda: _dlq_size(dev, "ledger") == 2, 30, "2 more in the DLQ")
    page.reload()
    expect(rows).to_have_count(2)
    page.check("input[name=scope][value=all]")
    page.click("#purge")
    expect(page.locator("h1")).to_contain_text("Purge from the DLQ of shop/ledger?")
    expect(page.locator(".warning")).to_contain_text("every message in the DLQ")
    assert _dlq_size(dev, "ledger") == 2  # nothing deleted before the confirmation
    page.click("#confirm-purge button")
    expect(page.locator(".flash")).to_contain_text("purged 2")
    expect(page.locator("#dlq-empty")).to_be_visible()
    assert _dlq_size(dev, "ledger") == 0


def test_a_dead_lettered_message_is_traced_from_the_dlq_and_from_the_search_box(
    page: Page, dev: Dev, endpoint: Hook
) -> None:
    _topic_and_sub(dev, "shop", "payments", {"name": "payer", "endpoint": {"url": endpoint.url}})
    endpoint.status = 400  # not retryable: straight to the DLQ
    publish(dev, "shop", "payments", [b"payment-1"])
    until_sync(lambda: _dlq_size(dev, "payer") == 1, 30, "the payment in the DLQ")
    with admin(dev) as api:
        dlq = api.get("/v1/projects/shop/subscriptions/payer/dlq/messages").json()
        (entry,) = dlq["messages"]
        mid = entry["message_id"]
        trace = f"/v1/projects/shop/topics/payments/messages/{mid}"

        def indexed() -> bool:
            r = api.get(trace)
            return r.status_code == 200 and r.json()["subscriptions"][0]["state"] == "dead_lettered"

        until_sync(indexed, 10, "the trace saying dead_lettered")
    log_in(page, dev, "/ui/projects/shop/subscriptions/payer/dlq")
    page.click("#dlq a.trace-link")
    expect(page.locator("h1")).to_contain_text(f"Trace of {mid}")
    section = page.locator("section.trace-sub[data-subscription='shop/payer']")
    expect(section.locator(".state")).to_have_text("dead_lettered")
    expect(section.locator("circle.trace-mark[data-type=attempted]")).to_have_count(1)
    expect(section.locator("circle.trace-mark[data-type=dead_lettered]")).to_have_count(1)
    expect(page.locator("#trace-stored")).to_contain_text("segment 1")
    shot(page, "14-trace")

    page.goto(f"{dev.control_plane}/ui/projects/shop/topics/payments")
    page.fill("#trace-search input[name=id]", mid)
    page.click("#trace-search button")
    expect(page.locator("h1")).to_contain_text(f"Trace of {mid}")
    page.fill("#trace-search input[name=id]", "no-such-message")
    page.click("#trace-search button")
    expect(page.locator("#trace-missing")).to_contain_text("not in the trace index")
    endpoint.status = 204


def test_cutover_from_the_topic_page_then_the_timeline_shows_two_segments(
    page: Page, dev: Dev, endpoint: Hook
) -> None:
    _topic_and_sub(dev, "shop", "events", {"name": "indexer", "endpoint": {"url": endpoint.url}})
    before = [f"before-{i}".encode() for i in range(4)]
    publish(dev, "shop", "events", before)
    log_in(page, dev, "/ui/projects/shop/topics/events")
    expect(page.locator("#timeline g.segment")).to_have_count(1)
    form = page.locator("#migrate")
    form.locator("select[name=cluster]").select_option("embedded")
    form.locator("input[name=partitions]").fill("3")
    page.once("dialog", lambda dialog: dialog.accept())  # Start cutover asks first
    form.locator("button").click()
    expect(page).to_have_url(re.compile(r"/topics/events/cutover$"))
    # The page follows the phases every second and shows the final one when it ends.
    expect(page.locator("#phase")).to_have_attribute("data-phase", "COMPLETE", timeout=45_000)
    expect(page.locator("ol.phases li.done")).to_have_count(4)
    producers = page.locator("#producers tbody tr")
    expect(producers).to_have_count(1)  # httpbus dev runs one producer
    expect(producers.first.locator("td.ack")).to_have_count(3)
    expect(page.locator("form[action$='/cutover/abort']")).to_have_count(0)
    shot(page, "11-cutover")

    after = [f"after-{i}".encode() for i in range(4)]
    publish(dev, "shop", "events", after)
    until_sync(lambda: sorted(endpoint.delivered) == sorted(before + after), 30, "all delivered")
    page.click("h1 a")  # back to the topic
    segments = page.locator("#timeline g.segment")
    expect(segments).to_have_count(2)
    expect(segments.nth(0)).to_contain_text("sealed")
    expect(segments.nth(0)).to_contain_text("2 partition(s)")
    expect(segments.nth(1)).to_contain_text("active")
    expect(segments.nth(1)).to_contain_text("3 partition(s)")
    expect(segments.nth(1)).to_contain_text("producers write here")
    shot(page, "12-timeline-two-segments")


def _store_reports(url: str, now_ms: int) -> int:
    """A reconciliation run and an hourly row, written by the report store's own code (the
    path the Spark job's output takes). A real ``httpbus audit run`` on the dev store took
    53 s alone and 123 s beside another Spark job on this machine: too slow for this suite;
    the Spark run itself is covered by the audit tests (test_audit_e2e)."""
    hour = now_ms // 3_600_000 * 3_600_000
    result = Reconciliation(
        since_ms=hour - 3_600_000,
        until_ms=now_ms,
        as_of_ms=now_ms,
        horizon_ms=300_000,
        events=1234,
        tallies=[
            SubscriptionTally(subscription="shop/mailer", expected=12, delivered=11, lost=1),
            SubscriptionTally(subscription="shop/ledger", expected=7, dead_lettered=2, delivered=5),
        ],
        findings=[Finding(kind=FindingKind.LOST, subscription="shop/mailer", message_id="m-lost")],
    )
    row = HourlyRow(
        window_start_ms=hour,
        window_end_ms=hour + 3_600_000,
        subscription="shop/mailer",
        accepted=12,
        attempted=14,
        delivered=11,
        failed_attempts=3,
        latency_p50_ms=8.0,
        latency_p95_ms=31.0,
        latency_p99_ms=57.5,
    )
    store = ReportStore.from_url(url)
    try:
        run_id = store.save_reconciliation(
            result, mode="batch", source="files", started_at_ms=now_ms, duration_ms=41_000
        )
        store.upsert_hourly([row])
    finally:
        store.close()
    return run_id


def test_audit_page_shows_the_latest_runs_and_the_hourly_report(
    page: Page, dev: Dev, reports_url: str
) -> None:
    run_id = _store_reports(reports_url, int(time.time() * 1000))
    log_in(page, dev, "/ui/audit")
    runs = page.locator("#audit-runs table")
    expect(runs.locator("thead th").first).to_have_text("id")
    first = runs.locator("tbody tr").first
    expect(first.locator("td").first).to_have_text(str(run_id))
    header = [t.strip() for t in runs.locator("thead th").all_text_contents()]
    cells = dict(zip(header, first.locator("td").all_text_contents(), strict=True))
    assert (cells["events"], cells["expected"], cells["lost"]) == ("1234", "19", "1"), cells
    hourly = page.locator("#audit-hourly table")
    header = [t.strip() for t in hourly.locator("thead th").all_text_contents()]
    assert header[:3] == ["subscription", "window start", "accepted"], header
    row = hourly.locator("tbody tr").filter(has_text="shop/mailer")
    cells = dict(zip(header, row.locator("td").all_text_contents(), strict=True))
    assert cells["delivered"] == "11" and cells["p99 ms"] == "57.5", cells
    assert cells["failure rate"] == "0.2143", cells
    shot(page, "13-audit")
    page.click(f"#audit-runs a[href='/ui/audit/runs/{run_id}']")
    expect(page.locator("h1")).to_have_text(f"Reconciliation run {run_id}")
    expect(page.locator("#run-lost")).to_contain_text("m-lost")
    expect(page.locator("#run-subscriptions")).to_contain_text("shop/ledger")
    # The filter form narrows the hourly report through the API's query.
    page.goto(f"{dev.control_plane}/ui/audit?project=shop&subscription=ledger")
    expect(page.locator("#audit-hourly")).to_contain_text("no rows")


def test_screens_are_where_the_readme_says() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for name in re.findall(r"docs/screenshots/([\w-]+\.png)", readme):
        assert (Path(__file__).resolve().parents[2] / "docs" / "screenshots" / name).exists()

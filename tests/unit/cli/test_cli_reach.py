"""The commands and flags that let the CLI reach the rest of the API (issue 39 item 4):
``topic grant add|list|remove``, ``user show``, ``whoami``, ``audit
runs|show|hourly|cutovers``, the endpoint's flags of ``sub create|update`` (timeout, method,
headers, disable-after, signing secret), ``project --notification-url`` and ``dlq list``'s
time filters, against
a real control plane (embedded backends, a SQLite report database) served over HTTP in this
process: their text, ``--output json`` and exit codes."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.audit import AuditCutover, CutoverCheck
from reports import migrate
from tests.support.cli import TOKEN, as_json, httpbus, ok, one_line_error, shop_control_plane_url
from tests.support.reports import sample_hour, seed_reports


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cp")


@pytest.fixture(scope="module")
def url(data: Path) -> Iterator[str]:
    reports = f"sqlite:///{data / 'reports.db'}"
    migrate.upgrade(reports)
    with shop_control_plane_url(data, database_url=reports, trace_index=False) as base:
        ok(httpbus(base, "project", "create", "billing"))
        yield base


def test_topic_grant_add_list_remove(url: str) -> None:
    said = ok(httpbus(url, "topic", "grant", "add", "shop", "orders", "billing"))
    assert said.strip() == "granted shop/orders to project billing"
    # Idempotent: a second add is no error.
    ok(httpbus(url, "topic", "grant", "add", "shop", "orders", "billing"))
    listed = ok(httpbus(url, "topic", "grant", "list", "shop", "orders"))
    assert "billing" in listed and "1–1 of 1" in listed
    listing = as_json(httpbus(url, "topic", "grant", "list", "shop", "orders", "-o", "json"))
    [grant] = listing["items"]
    assert (grant["project"], grant["topic"], grant["grantee"]) == ("shop", "orders", "billing")
    # With the grant, billing subscribes to shop/orders.
    ok(
        httpbus(
            url,
            *("sub", "create", "billing", "bills", "--topic", "shop/orders"),
            *("--endpoint", "http://127.0.0.1:9/hook"),
        )
    )

    one_line_error(httpbus(url, "topic", "grant", "add", "shop", "orders", "nope"), 1, "422")
    one_line_error(httpbus(url, "topic", "grant", "list", "shop", "nope"), 3, "404")
    # Off a terminal a removal needs --yes (exit 2), and nothing changes.
    one_line_error(
        httpbus(url, "topic", "grant", "remove", "shop", "orders", "billing"), 2, "--yes"
    )
    removed = httpbus(
        url, "topic", "grant", "remove", "shop", "orders", "billing", "--yes", "-o", "json"
    )
    assert as_json(removed)["grantee"] == "billing"
    gone = as_json(httpbus(url, "topic", "grant", "list", "shop", "orders", "-o", "json"))
    assert gone["items"] == []
    refused = httpbus(
        url,
        *("sub", "create", "billing", "bills2", "--topic", "shop/orders"),
        *("--endpoint", "http://127.0.0.1:9/hook"),
    )
    one_line_error(refused, 1, "403 grant_required")


def test_user_show_and_whoami(url: str) -> None:
    ok(
        httpbus(
            url,
            *("user", "create", "ann", "--role", "viewer:shop", "--password-stdin"),
            input="ann's password\n",
        )
    )
    assert ok(httpbus(url, "user", "show", "ann")).strip() == "ann: viewer:shop"
    shown = as_json(httpbus(url, "user", "show", "ann", "-o", "json"))
    assert shown["name"] == "ann" and shown["roles"] == ["viewer:shop"] and "password" not in shown
    one_line_error(httpbus(url, "user", "show", "nobody"), 3, "404")

    assert as_json(httpbus(url, "whoami", "-o", "json"))["roles"] == ["admin"]
    assert ok(httpbus(url, "whoami")).strip() == "admin-token: admin"
    token = as_json(httpbus(url, "user", "token", "create", "ann", "-o", "json"))["token"]
    assert ok(httpbus(url, "whoami", token=token)).strip() == "user ann: viewer:shop"
    one_line_error(httpbus(url, "whoami", token="hbk.not-a-token"), 1, "401")


def _seed(data: Path) -> int:
    """The sample run, an hourly row and a cutover verification."""
    hourly = sample_hour(accepted=3, attempted=4, latency_p50_ms=12.0)  # failure rate 0.25
    cutover = AuditCutover(
        project="shop", topic="orders", from_segment=1, to_segment=2, sealed_at_ms=0
    )
    check = CutoverCheck(
        cutover=cutover, old_segment_messages=7, new_segment_messages=5, groups_across=2
    )
    return seed_reports(f"sqlite:///{data / 'reports.db'}", [hourly], [check])


def test_audit_report_reads(url: str, data: Path) -> None:
    assert ok(httpbus(url, "audit", "runs")).strip().endswith("0 run(s)")
    one_line_error(httpbus(url, "audit", "show", "1"), 3, "404", "run 1 does not exist")
    run_id = _seed(data)

    runs = ok(httpbus(url, "audit", "runs", "--limit", "5"))
    assert "batch" in runs and "1 run(s)" in runs
    [run] = as_json(httpbus(url, "audit", "runs", "-o", "json"))["runs"]
    assert (run["id"], run["lost"], run["duplicates"]) == (run_id, 1, 1)

    shown = ok(httpbus(url, "audit", "show", str(run_id)))
    assert "lost shop/s1 m-lost-1" in shown and "duplicates shop/s1 m7 ×2" in shown
    assert shown.strip().endswith("lost 1, late 0, duplicates 1")
    detail = as_json(httpbus(url, "audit", "show", str(run_id), "-o", "json"))
    assert detail["lost"][0]["message_id"] == "m-lost-1"

    hourly = ok(httpbus(url, "audit", "hourly", "--subscription", "shop/s1"))
    assert "shop/s1" in hourly and "0.25" in hourly and "41.5" in hourly and "1 row(s)" in hourly
    rows = as_json(
        httpbus(
            url,
            *("audit", "hourly", "--project", "shop", "--subscription", "s1"),
            *("--since", "1970-01-01T00:00:00Z", "-o", "json"),
        )
    )["rows"]
    assert [r["delivered"] for r in rows] == [2]
    later = httpbus(url, "audit", "hourly", "--since", "2030-01-01T00:00:00Z", "-o", "json")
    assert as_json(later)["rows"] == []
    bad = httpbus(url, "audit", "hourly", "--since", "yesterday")
    one_line_error(bad, 2, "--since", "RFC 3339")
    one_line_error(httpbus(url, "audit", "hourly", "--subscription", "s1"), 1, "422", "project")

    newer = seed_reports(f"sqlite:///{data / 'reports.db'}")  # a second run: two pages of one
    page = ok(httpbus(url, "audit", "runs", "--limit", "1"))
    cursor = page.strip().rsplit("--cursor ", 1)[1]
    assert f"{newer}" in page and "1 run(s); older ones: --cursor" in page
    older = as_json(httpbus(url, "audit", "runs", "--limit", "1", "--cursor", cursor, "-o", "json"))
    assert [r["id"] for r in older["runs"]] == [run_id] and older["next_cursor"] is None

    cutovers = ok(httpbus(url, "audit", "cutovers"))
    assert "shop/orders" in cutovers and "1 → 2" in cutovers and "yes" in cutovers
    [check] = as_json(httpbus(url, "audit", "cutovers", "-o", "json"))["cutovers"]
    assert (check["old_segment_messages"], check["groups_across"], check["ok"]) == (7, 2, True)


def _sub(url: str, project: str, name: str) -> dict[str, Any]:
    answer = httpx.get(
        f"{url}/v1/projects/{project}/subscriptions/{name}",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert answer.status_code == 200, answer.text
    found: dict[str, Any] = answer.json()
    return found


def test_sub_endpoint_flags(url: str, tmp_path: Path) -> None:
    secret = "whsec_" + base64.b64encode(b"a-secret-of-the-cli-test-32-byte").decode()
    (tmp_path / "secret").write_text(secret + "\n")
    made = httpbus(
        url,
        *("sub", "create", "shop", "e1", "--topic", "orders"),
        *("--endpoint", "http://127.0.0.1:9/hook", "--timeout-ms", "2500", "--method", "PUT"),
        *("--header", "X-Env=prod", "--header", "Authorization=Bearer abc=="),
        *("--disable-after", "2h", "--signing-secret-file", str(tmp_path / "secret")),
    )
    assert f"signing secret (shown this once): {secret}" in ok(made)
    endpoint = _sub(url, "shop", "e1")["endpoint"]
    assert (endpoint["timeout_ms"], endpoint["method"], endpoint["disable_after_s"]) == (
        2500,
        "PUT",
        7200,
    )
    assert endpoint["headers"] == {"X-Env": "prod", "Authorization": "********"}

    changed = ok(
        httpbus(
            url,
            *("sub", "update", "shop", "e1", "--header", "x-env=dev"),
            *("--remove-header", "X-Nothing", "--disable-after", "never", "--timeout-ms", "900"),
        )
    )
    assert "endpoint.disable_after_s 7200 → none" in changed and "timeout_ms 2500 → 900" in changed
    endpoint = _sub(url, "shop", "e1")["endpoint"]
    # x-env replaced X-Env; the masked credential was sent back as read, so it is kept.
    assert endpoint["headers"] == {"x-env": "dev", "Authorization": "********"}
    assert endpoint["disable_after_s"] is None
    revealed = ok(httpbus(url, "sub", "reveal-secret", "shop", "e1"))
    assert "Authorization: Bearer abc==" in revealed

    ok(httpbus(url, "sub", "update", "shop", "e1", "--remove-header", "authorization"))
    assert _sub(url, "shop", "e1")["endpoint"]["headers"] == {"x-env": "dev"}

    base = ("sub", "update", "shop", "e1")
    one_line_error(httpbus(url, *base, "--header", "X-Env"), 2, "--header", "NAME=VALUE")
    one_line_error(httpbus(url, *base, "--disable-after", "soon"), 2, "--disable-after")
    one_line_error(httpbus(url, *base, "--header", "A=1", "--remove-header", "a"), 2, "both name A")
    bad = httpbus(url, *base, "--timeout-ms", "50")
    assert bad.exit_code == 2 and "--timeout-ms" in bad.stderr
    refused = httpbus(
        url,
        *("sub", "create", "shop", "e2", "--topic", "orders"),
        *("--endpoint", "http://127.0.0.1:9/hook", "--disable-after", "60d"),
    )
    one_line_error(refused, 1, "422", "disable_after_s")


def test_project_notification_url(url: str) -> None:
    made = ok(
        httpbus(
            url, "project", "create", "notes", "--notification-url", "https://example.com/notice"
        )
    )
    assert made.startswith("created project notes\nnotification secret (shown this once): whsec_")
    shown = as_json(httpbus(url, "project", "update", "notes", "--description", "d", "-o", "json"))
    assert shown["notification_url"] == "https://example.com/notice"  # kept
    assert shown["description"] == "d" and not shown.get("notification_secret")
    said = ok(httpbus(url, "project", "update", "notes", "--no-notification-url"))
    assert said.strip() == (
        'updated project notes: notification_url "https://example.com/notice" → none'
    )
    one_line_error(httpbus(url, "project", "update", "notes"), 2, "nothing to change")
    one_line_error(
        httpbus(
            url,
            *("project", "update", "notes", "--notification-url", "https://example.com/n"),
            "--no-notification-url",
        ),
        2,
        "not both",
    )
    one_line_error(
        httpbus(url, "project", "update", "notes", "--notification-url", "not a url"), 1, "422"
    )


def test_dlq_list_time_filters(url: str) -> None:
    ok(
        httpbus(
            url,
            *("sub", "create", "shop", "d1", "--topic", "orders"),
            *("--endpoint", "http://127.0.0.1:9/hook"),
        )
    )
    page = as_json(
        httpbus(
            url,
            *("dlq", "list", "shop", "d1", "--failed-after", "2026-01-01T00:00:00Z"),
            *("--failed-before", "now", "-o", "json"),
        )
    )
    assert page["messages"] == []
    one_line_error(
        httpbus(url, "dlq", "list", "shop", "d1", "--failed-after", "yesterday"),
        2,
        "--failed-after",
    )


def test_sub_retry_and_circuit_details(url: str) -> None:
    ok(
        httpbus(
            url,
            *("sub", "create", "shop", "r1", "--topic", "orders"),
            *("--endpoint", "http://127.0.0.1:9/hook", "--max-attempts", "4"),
            *("--retry", "initial_delay_ms=500", "--retry", "retry_statuses=[500, 503]"),
            *("--retry", "backoff=linear", "--circuit", "failure_rate_threshold=0.3"),
            *("--circuit", "enabled=false"),
        )
    )
    sub = _sub(url, "shop", "r1")
    retry, circuit = sub["retry"], sub["circuit_breaker"]
    assert (retry["max_attempts"], retry["backoff"], retry["initial_delay_ms"]) == (
        4,
        "linear",
        500,
    )
    assert retry["retry_statuses"] == [500, 503]
    assert (circuit["failure_rate_threshold"], circuit["enabled"]) == (0.3, False)

    said = ok(
        httpbus(
            url,
            *("sub", "update", "shop", "r1", "--retry", "jitter=0", "--retry", "retry_4xx=true"),
            *("--circuit", "enabled=true", "--circuit", "cooldown_seconds=30"),
        )
    )
    assert "retry.jitter 0.2 → 0" in said and "retry.retry_4xx False → True" in said
    assert "circuit_breaker.cooldown_seconds 10 → 30" in said
    sub = _sub(url, "shop", "r1")
    assert sub["retry"]["initial_delay_ms"] == 500  # the rest of the policy stays
    assert sub["circuit_breaker"]["enabled"] is True
    assert sub["circuit_breaker"]["failure_rate_threshold"] == 0.3

    base = ("sub", "update", "shop", "r1")
    one_line_error(httpbus(url, *base, "--retry", "jitter"), 2, "--retry", "KEY=VALUE")
    one_line_error(httpbus(url, *base, "--retry", "jiter=0.1"), 1, "422", "jiter")
    one_line_error(httpbus(url, *base, "--circuit", "min_calls=0"), 1, "422", "min_calls")


def test_sub_show_and_project_show(url: str) -> None:
    ok(
        httpbus(
            url,
            *("sub", "create", "shop", "v1", "--topic", "orders"),
            *("--endpoint", "http://127.0.0.1:9/hook", "--header", "X-Api-Key=k1"),
            *("--disable-after", "never", "--filter", 'headers["x-region"] == "eu"'),
        )
    )
    shown = ok(httpbus(url, "sub", "show", "shop", "v1"))
    assert "shop/v1 (active) reads shop/orders, shards 1" in shown
    assert "endpoint  POST http://127.0.0.1:9/hook  timeout 10000 ms  disable after never" in shown
    assert "headers   X-Api-Key: ********" in shown and "k1" not in shown
    assert 'filter    headers["x-region"] == "eu"' in shown
    assert "retry     max_attempts 10, backoff exponential" in shown
    assert "circuit   enabled True, failure_rate_threshold 0.5" in shown
    assert "auth      type none" in shown and "secret    set" in shown
    assert as_json(httpbus(url, "sub", "show", "shop", "v1", "-o", "json"))["name"] == "v1"
    one_line_error(httpbus(url, "sub", "show", "shop", "nope"), 3, "404")

    project = ok(httpbus(url, "project", "show", "shop"))
    assert project.startswith("shop: (no description)\nnotification url - (secret set)\n")
    assert as_json(httpbus(url, "project", "show", "shop", "-o", "json"))["name"] == "shop"
    one_line_error(httpbus(url, "project", "show", "nope"), 3, "404")


def test_topic_create_settings_and_an_external_topic_refused_here(url: str) -> None:
    made = httpbus(
        url,
        *("topic", "create", "shop", "big", "--description", "large orders"),
        *("--max-message-bytes", "2048", "--max-qps", "50", "--max-bytes-per-second", "4096"),
    )
    ok(made)
    topic = as_json(httpbus(url, "topic", "list", "shop", "-o", "json"))["items"]
    [big] = [t for t in topic if t["name"] == "big"]
    assert (big["description"], big["max_message_bytes"]) == ("large orders", 2048)
    assert big["capacity"] == {"max_qps": 50, "max_bytes_per_second": 4096}
    # The embedded cluster is not a read_only Kafka cluster: the API names the field.
    refused = httpbus(url, "topic", "create", "shop", "adopted", "--external-topic", "orders-v1")
    one_line_error(refused, 1, "422", "external_topic")


def test_sub_create_description_and_paused(url: str) -> None:
    ok(
        httpbus(
            url,
            *("sub", "create", "shop", "p1", "--topic", "orders"),
            *("--endpoint", "http://127.0.0.1:9/hook", "--paused", "--description", "later"),
        )
    )
    sub = _sub(url, "shop", "p1")
    assert (sub["paused"], sub["description"]) == (True, "later")
    assert "shop/p1 (paused)" in ok(httpbus(url, "sub", "show", "shop", "p1"))


def test_machine_token_and_migration_history_since(url: str) -> None:
    made = as_json(httpbus(url, "user", "token", "create", "--role", "viewer:shop", "-o", "json"))
    assert made["user"] is None and made["roles"] == ["viewer:shop"]
    said = ok(httpbus(url, "user", "token", "create", "--role", "viewer:shop"))
    assert said.startswith("created API token ") and " for viewer:shop\n" in said
    assert ok(httpbus(url, "whoami", token=made["token"])).strip().endswith(": viewer:shop")
    one_line_error(httpbus(url, "user", "token", "create"), 2, "--role")
    one_line_error(httpbus(url, "user", "token", "create", "ann", "--role", "admin"), 2, "not both")
    one_line_error(
        httpbus(url, "topic", "migration", "status", "shop", "orders", "--since", "1h"),
        2,
        "--since goes with --history",
    )


def test_search_dlq_summary_kind_and_status_range(url: str) -> None:
    """``search``, ``dlq summary``, ``dlq list --kind`` and ``sub status --range``: the routes
    the overview's merge added."""
    ok(
        httpbus(
            url,
            *("sub", "create", "shop", "s-search", "--topic", "orders"),
            *("--endpoint", "http://127.0.0.1:9/hook"),
        )
    )
    found = ok(httpbus(url, "search", "SEARCH"))
    assert "subscription shop/s-search" in found and "topic shop/orders" not in found
    assert "nothing found for 'zzz'" in ok(httpbus(url, "search", "zzz"))
    assert as_json(httpbus(url, "search", "orders", "-o", "json"))["topics"] == [
        {"project": "shop", "topic": "orders"}
    ]
    said = ok(httpbus(url, "dlq", "summary", "shop", "s-search"))
    assert said.startswith("0 dead-lettered: 0 failed heads, 0 sidelined"), said
    page = as_json(httpbus(url, "dlq", "list", "shop", "s-search", "--kind", "heads", "-o", "json"))
    assert page["messages"] == []
    assert httpbus(url, "dlq", "list", "shop", "s-search", "--kind", "x").exit_code == 2
    status = as_json(
        httpbus(url, "sub", "status", "shop", "s-search", "--range", "10m", "-o", "json")
    )
    assert "dlq" in status
    assert httpbus(url, "sub", "status", "shop", "s-search", "--range", "2d").exit_code == 2

"""The ``httpbus`` commands against a running ``httpbus dev`` (control plane, producer and
worker as real processes, the merged APIs): subscription status / pause / resume / seek with
real deliveries, the DLQ filled by an endpoint answering 400 then replayed and purged, a topic
migrated through a real cutover followed live until COMPLETE, ``tail`` following deliveries,
a walk through update, delete, produce tokens and ``topic cutover status``, and for bad input
a non-zero exit with a one-line error."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner, Result

from cli import cli
from tests.support.cli import as_json, ok, one_line_error
from tests.support.cli import httpbus as cli_httpbus
from tests.support.dev import Dev, run_dev
from tests.support.ui import TOKEN, Hook, publish
from tests.support.until import until_sync


@pytest.fixture(scope="module")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dev]:
    with run_dev(tmp_path_factory.mktemp("cli-real"), TOKEN) as running:
        yield running


def httpbus(dev: Dev, *args: str, input: str | None = None) -> Result:
    return cli_httpbus(dev.control_plane, *args, token=TOKEN, input=input)


def _setup(dev: Dev, project: str, topic: str, sub: str, url: str) -> None:
    ok(httpbus(dev, "project", "create", project))
    ok(httpbus(dev, "topic", "create", project, topic, "--partitions", "2"))
    ok(httpbus(dev, "sub", "create", project, sub, "--topic", topic, "--endpoint", url))


def _status(dev: Dev, project: str, sub: str) -> dict[str, Any]:
    found: dict[str, Any] = as_json(httpbus(dev, "sub", "status", project, sub, "-o", "json"))
    return found


def test_help_lists_every_group() -> None:
    """The installed entry point (not the in-process app): every command group is there."""
    out = subprocess.run(
        [sys.executable, "-m", "cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    groups = ("dev", "produce", "project", "topic", "sub", "token", "dlq", "tail", "audit", "db")
    for group in groups:
        assert f" {group} " in out, (group, out)
    assert "Exit codes" in out
    assert "run" in ok(CliRunner().invoke(cli, ["audit", "--help"]))


def test_sub_status_pause_resume_seek_on_real_deliveries(dev: Dev, endpoint: Hook) -> None:
    _setup(dev, "ops", "orders", "mailer", endpoint.url)
    first = [f"o-{i}".encode() for i in range(6)]
    publish(dev, "ops", "orders", first)

    def settled() -> bool:  # delivered, and the positions committed (they follow shortly)
        found = _status(dev, "ops", "mailer")
        return bool(found["totals"]["delivered"] == 6 and found["lag"] == 0)

    until_sync(settled, what="6 delivered and committed")
    text = ok(httpbus(dev, "sub", "status", "ops", "mailer"))
    assert "ops/mailer: running" in text and "circuit closed" in text, text
    assert "delivered 6" in text and "lag 0" in text, text

    assert "ops/mailer paused" in ok(httpbus(dev, "sub", "pause", "ops", "mailer"))
    until_sync(lambda: _status(dev, "ops", "mailer")["state"] == "paused", what="paused")
    # The worker notices the pause through its watch of the subscription (embedded
    # metastore: polled), within a second or so; what is published after that is held.
    time.sleep(2.0)  # not observable from here: the worker's view of the pause
    publish(dev, "ops", "orders", [b"held-1", b"held-2", b"held-3"])
    until_sync(lambda: _status(dev, "ops", "mailer")["lag"] == 3, what="lag 3 while paused")
    time.sleep(1.0)  # proves that nothing is delivered while paused
    assert len(endpoint.delivered) == 6  # nothing delivered while paused
    assert "ops/mailer running" in ok(httpbus(dev, "sub", "resume", "ops", "mailer"))
    until_sync(lambda: len(endpoint.delivered) == 9, what="the held three delivered after resume")

    moved = ok(httpbus(dev, "sub", "seek", "ops", "mailer", "--to", "earliest"))
    assert "ops/mailer now at segment 1: p0@0, p1@0" in moved, moved
    # Back to the start: every message is delivered a second time.
    until_sync(lambda: len(endpoint.delivered) == 18, what="all 9 again after seek to earliest")
    assert sorted(endpoint.delivered) == sorted(2 * (first + [b"held-1", b"held-2", b"held-3"]))
    latest = as_json(httpbus(dev, "sub", "seek", "ops", "mailer", "--to", "latest", "-o", "json"))
    assert latest["segment"] == 1 and sum(latest["positions"].values()) == 9

    one_line_error(httpbus(dev, "sub", "status", "ops", "nope"), 3, "404")
    one_line_error(httpbus(dev, "sub", "seek", "ops", "mailer"), 2, "exactly one")
    one_line_error(
        httpbus(dev, "sub", "seek", "ops", "mailer", "--timestamp", "yesterday"), 2, "RFC 3339"
    )
    one_line_error(
        httpbus(dev, "sub", "create", "ops", "x", "--topic", "nope", "--endpoint", endpoint.url),
        1,  # the topic is a field of the body: a 422 naming it
        "422",
        "topic: ops/nope does not exist",
    )
    bad_flag = httpbus(dev, "sub", "pause", "ops", "mailer", "--bogus")
    assert bad_flag.exit_code == 2 and "No such option" in bad_flag.stderr


def _dlq(dev: Dev, sub: str) -> list[dict[str, Any]]:
    page = as_json(httpbus(dev, "dlq", "list", "ops", sub, "--limit", "500", "-o", "json"))
    messages: list[dict[str, Any]] = page["messages"]
    return messages


def test_dlq_list_unsideline_and_purge(dev: Dev, endpoint: Hook) -> None:
    ok(httpbus(dev, "topic", "create", "ops", "refunds", "--partitions", "2"))
    ok(
        httpbus(
            dev, "sub", "create", "ops", "ledger", "--topic", "refunds", "--endpoint", endpoint.url
        )
    )
    endpoint.status = 400  # not retryable: to the DLQ at once
    refunds = [f"refund-{i}".encode() for i in range(4)]
    publish(dev, "ops", "refunds", refunds)
    until_sync(lambda: len(_dlq(dev, "ledger")) == 4, what="4 in the DLQ")
    listed = ok(httpbus(dev, "dlq", "list", "ops", "ledger", "--order", "oldest"))
    assert "DLQ of ops/ledger" in listed and "HTTP 400" in listed, listed
    assert all(r.decode() in listed for r in refunds), listed

    endpoint.status = 204
    assert "unsidelined 4" in ok(
        httpbus(dev, "dlq", "unsideline", "ops", "ledger", "--before", "now")
    )
    until_sync(lambda: sorted(endpoint.delivered) == sorted(refunds), what="the replay delivered")
    assert _dlq(dev, "ledger") == []

    endpoint.status = 400
    publish(dev, "ops", "refunds", [b"bad-1", b"bad-2", b"bad-3"])
    until_sync(lambda: len(_dlq(dev, "ledger")) == 3, what="3 more in the DLQ")
    one_id = _dlq(dev, "ledger")[0]["message_id"]
    refused = httpbus(dev, "dlq", "purge", "ops", "ledger", "--all", input="y\n")
    one_line_error(refused, 2, "not a terminal", "--yes")  # a pipe is never asked
    assert len(_dlq(dev, "ledger")) == 3
    purged = as_json(
        httpbus(dev, "dlq", "purge", "ops", "ledger", "--id", one_id, "-y", "-o", "json")
    )
    assert purged == {"purged": 1} and len(_dlq(dev, "ledger")) == 2
    assert "purged 2" in ok(httpbus(dev, "dlq", "purge", "ops", "ledger", "--all", "--yes"))
    assert _dlq(dev, "ledger") == []

    one_line_error(httpbus(dev, "dlq", "unsideline", "ops", "ledger"), 2, "exactly one")
    one_line_error(
        httpbus(dev, "dlq", "unsideline", "ops", "ledger", "--before", "soon"), 2, "RFC 3339"
    )
    one_line_error(
        httpbus(dev, "dlq", "unsideline", "ops", "ledger", "--before", "2999-01-01T00:00:00Z"),
        1,
        "422",
        "future",
    )
    one_line_error(httpbus(dev, "dlq", "list", "ops", "nope"), 3, "404")


def test_topic_migrate_follows_a_real_cutover_until_complete(dev: Dev, endpoint: Hook) -> None:
    ok(httpbus(dev, "topic", "create", "ops", "events", "--partitions", "2"))
    ok(
        httpbus(
            dev, "sub", "create", "ops", "indexer", "--topic", "events", "--endpoint", endpoint.url
        )
    )
    publish(dev, "ops", "events", [b"before-1", b"before-2"])
    out = ok(
        httpbus(
            dev,
            "topic",
            "migrate",
            "ops",
            "events",
            "--cluster",
            "embedded",
            "--partitions",
            "3",
            "--interval",
            "0.1",
        )
    )
    lines = out.splitlines()
    assert lines[0].startswith("cutover ") and lines[0].endswith("segment 1 → 2"), out
    assert lines[-1].startswith("■■■■ COMPLETE"), out
    assert "producers: prepared 1/1, switched 1/1, committed 1/1" in lines[-1], out
    publish(dev, "ops", "events", [b"after-1", b"after-2"])
    until_sync(lambda: len(endpoint.delivered) == 4, what="delivered across the cutover")
    timeline = as_json(httpbus(dev, "topic", "show", "ops", "events", "-o", "json"))
    assert [(s["id"], s["state"], s["partitions"]) for s in timeline["segments"]] == [
        (1, "sealed", 2),
        (2, "active", 3),
    ]
    assert "[1 embedded×2] → [2 embedded×3]" in ok(httpbus(dev, "topic", "show", "ops", "events"))

    one_line_error(
        httpbus(dev, "topic", "migrate", "ops", "events", "--cluster", "mars", "--partitions", "1"),
        1,
        "unknown storage cluster",
    )
    one_line_error(
        httpbus(
            dev, "topic", "migrate", "ops", "nope", "--cluster", "embedded", "--partitions", "1"
        ),
        3,
        "nope",
    )
    missing = httpbus(dev, "topic", "migrate", "ops", "events", "--partitions", "1")
    assert missing.exit_code == 2 and "--cluster" in missing.stderr


def test_tail_prints_a_line_each_time_deliveries_change(dev: Dev, endpoint: Hook) -> None:
    ok(httpbus(dev, "topic", "create", "ops", "clicks"))
    ok(
        httpbus(
            dev, "sub", "create", "ops", "counter", "--topic", "clicks", "--endpoint", endpoint.url
        )
    )
    later = threading.Timer(1.0, publish, (dev, "ops", "clicks", [b"c1", b"c2", b"c3"]))
    later.start()
    try:
        out = ok(httpbus(dev, "tail", "ops", "counter", "--interval", "0.25", "--count", "24"))
    finally:
        later.join()
    lines = out.splitlines()
    assert "delivered 0 (+0)" in lines[0], out
    assert len(lines) >= 2 and "delivered 3 (+" in lines[-1], out
    assert all("circuit" in line and "lag" in line for line in lines), out
    rows = ok(httpbus(dev, "tail", "ops", "counter", "--count", "1", "-o", "json")).splitlines()
    assert json.loads(rows[0])["totals"]["delivered"] == 3
    one_line_error(httpbus(dev, "tail", "ops", "nope", "--count", "1"), 3, "404")


def _produce_status(dev: Dev, project: str, topic: str, token: str) -> int:
    url = f"{dev.producer}/v1/projects/{project}/topics/{topic}/produce"
    headers = {"Authorization": f"Bearer {token}"}
    return httpx.post(url, content=b"x", headers=headers, timeout=15).status_code


def test_update_delete_tokens_and_cutover_status_on_the_real_control_plane(
    dev: Dev, endpoint: Hook
) -> None:
    ok(httpbus(dev, "project", "create", "walk"))
    ok(httpbus(dev, "topic", "create", "walk", "orders", "--partitions", "2"))
    changed = ok(httpbus(dev, "topic", "update", "walk", "orders", "--retention", "2d"))
    assert changed.strip() == "updated topic walk/orders: retention_hours 168 → 48", changed
    ok(
        httpbus(
            dev, "sub", "create", "walk", "mailer", "--topic", "orders", "--endpoint", endpoint.url
        )
    )
    sub = as_json(
        httpbus(dev, "sub", "update", "walk", "mailer", "--max-in-flight", "50", "-o", "json")
    )
    assert sub["max_in_flight"] == 50 and sub["endpoint"]["url"] == endpoint.url

    # A produce token: printed once, listed without it, publishes, and is refused once revoked.
    made = as_json(httpbus(dev, "token", "create", "walk", "--topic", "orders", "-o", "json"))
    assert made["id"] in ok(httpbus(dev, "token", "list", "walk"))
    assert _produce_status(dev, "walk", "orders", made["token"]) == 201
    until_sync(lambda: len(endpoint.delivered) == 1, what="the token's message delivered")
    assert f"revoked token {made['id']}" in ok(
        httpbus(dev, "token", "revoke", "walk", made["id"], "--yes")
    )
    assert as_json(httpbus(dev, "token", "list", "walk", "-o", "json"))["items"] == []
    until_sync(
        lambda: _produce_status(dev, "walk", "orders", made["token"]) == 401,
        what="the revoked token refused by the producer",
    )

    # A cutover started without waiting, followed by status --watch, then read and not aborted.
    one_line_error(httpbus(dev, "topic", "cutover", "status", "walk", "orders"), 3, "no cutover")
    args = ("topic", "migrate", "walk", "orders", "--cluster", "embedded", "--partitions", "3")
    ok(httpbus(dev, *args, "--no-wait"))
    watched = ok(
        httpbus(dev, "topic", "cutover", "status", "walk", "orders", "-w", "--interval", "0.1")
    )
    assert "■■■■ COMPLETE" in watched and "phase COMPLETE" in watched, watched
    shown = as_json(httpbus(dev, "topic", "cutover", "status", "walk", "orders", "-o", "json"))
    assert shown["phase"] == "COMPLETE" and set(shown["phase_times"]) >= {"PREPARE", "COMPLETE"}
    assert all(p["committed_at"] for p in shown["producers"].values()), shown
    one_line_error(httpbus(dev, "topic", "cutover", "abort", "walk", "orders"), 4, "409")

    # Deletes: refused while something depends on them, then done with --yes.
    one_line_error(httpbus(dev, "project", "delete", "walk", "--yes"), 4, "in_use")
    one_line_error(
        httpbus(dev, "topic", "delete", "walk", "orders", "--yes"), 4, "walk/mailer", "--force"
    )
    one_line_error(httpbus(dev, "sub", "delete", "walk", "mailer"), 2, "--yes")  # not a terminal
    ok(httpbus(dev, "sub", "delete", "walk", "mailer", "--yes"))
    one_line_error(httpbus(dev, "sub", "status", "walk", "mailer"), 3, "404")
    deleted = as_json(httpbus(dev, "topic", "delete", "walk", "orders", "--yes", "-o", "json"))
    assert deleted["topic"] == "orders"
    assert "deleted project walk" in ok(httpbus(dev, "project", "delete", "walk", "--yes"))
    one_line_error(httpbus(dev, "topic", "list", "walk"), 3, "404")

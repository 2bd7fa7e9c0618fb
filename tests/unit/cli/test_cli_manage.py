"""``httpbus project|topic|sub update|delete`` and ``httpbus token create|list|revoke`` against
a real control plane (embedded backends, served over HTTP in this process): text and
``--output json``, the exit codes of their errors, and the confirmation rule of deletes (asked
on a terminal unless ``--yes``; never read from a pipe: without ``--yes`` a script gets exit 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cli import kit
from tests.support.cli import (
    TOKEN,
    answered,
    as_json,
    declined,
    embedded_control_plane_url,
    httpbus,
    ok,
    one_line_error,
)

HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with embedded_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if a person ran the command: stdin is a terminal, so deletes ask."""
    monkeypatch.setattr(kit, "stdin_is_terminal", lambda: True)


def _get(url: str, *parts: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.get(f"{url}/v1/projects/" + "/".join(parts), headers=headers)


def _world(url: str, project: str, *subs: str) -> None:
    ok(httpbus(url, "project", "create", project, "--description", "before"))
    ok(httpbus(url, "topic", "create", project, "orders"))
    for sub in subs:
        ok(httpbus(url, "sub", "create", project, sub, "--topic", "orders", "--endpoint", HOOK))


def test_project_update_and_delete(url: str) -> None:
    _world(url, "p1")
    out = ok(httpbus(url, "project", "update", "p1", "--description", "the shop"))
    assert out.strip() == 'updated project p1: description "before" → "the shop"'
    updated = as_json(httpbus(url, "project", "update", "p1", "--description", "x", "-o", "json"))
    assert updated["description"] == "x" and updated["name"] == "p1"
    one_line_error(httpbus(url, "project", "update", "nope", "--description", "x"), 3, "404")
    assert httpbus(url, "project", "update", "p1").exit_code == 2  # --description is required

    refused = httpbus(url, "project", "delete", "p1", "--yes")
    one_line_error(refused, 4, "409 in_use", "still has topics")
    ok(httpbus(url, "topic", "delete", "p1", "orders", "--yes"))
    deleted = as_json(httpbus(url, "project", "delete", "p1", "--yes", "-o", "json"))
    assert deleted == {"deleted": "project", "project": "p1"}
    assert _get(url, "p1").status_code == 404
    one_line_error(httpbus(url, "project", "delete", "p1", "-y"), 3, "404")


def test_topic_update_changes_only_what_is_given(url: str) -> None:
    _world(url, "p2")
    ok(httpbus(url, "topic", "update", "p2", "orders", "--description", "orders placed"))
    out = ok(httpbus(url, "topic", "update", "p2", "orders", "--retention", "2w"))
    assert out.strip() == "updated topic p2/orders: retention_hours 168 → 336", out
    topic = as_json(
        httpbus(
            url, "topic", "update", "p2", "orders", "--max-qps", "50", "--retention", "36h", "-o",
            "json",
        )
    )  # fmt: skip
    assert (topic["retention_hours"], topic["capacity"]["max_qps"]) == (36, 50)
    assert topic["description"] == "orders placed"  # kept: only what is given changes
    assert topic["capacity"]["max_bytes_per_second"] == 10 * 1024 * 1024
    assert ok(httpbus(url, "topic", "update", "p2", "orders", "--retention", "36")).endswith(
        "no change\n"
    )

    bad = httpbus(url, "topic", "update", "p2", "orders", "--retention", "soon")
    assert bad.exit_code == 2 and "36h, 7d or 2w" in bad.stderr
    one_line_error(httpbus(url, "topic", "update", "p2", "orders"), 2, "nothing to change")
    one_line_error(
        httpbus(url, "topic", "update", "p2", "orders", "--retention", "9999d"),
        1,
        "422",
        "retention_hours",
    )
    one_line_error(httpbus(url, "topic", "update", "p2", "nope", "--retention", "1d"), 3, "404")


def test_topic_delete_refused_while_subscribed_unless_force(url: str) -> None:
    _world(url, "p3", "mailer", "audit")
    one_line_error(
        httpbus(url, "topic", "delete", "p3", "orders", "--yes"),
        4,
        "409 in_use",
        "p3/audit, p3/mailer",
        "--force",
    )
    assert _get(url, "p3", "topics", "orders").status_code == 200
    deleted = as_json(
        httpbus(url, "topic", "delete", "p3", "orders", "--force", "-y", "-o", "json")
    )
    assert deleted == {"deleted": "topic", "project": "p3", "topic": "orders", "force": True}
    assert _get(url, "p3", "topics", "orders").status_code == 404
    assert _get(url, "p3", "subscriptions", "mailer").status_code == 404
    one_line_error(httpbus(url, "topic", "delete", "p3", "orders", "--yes"), 3, "404")


def test_deletes_ask_on_a_terminal_and_never_read_a_pipe(url: str, terminal: None) -> None:
    _world(url, "p4", "mailer")
    declined(httpbus(url, "sub", "delete", "p4", "mailer", input="n\n"), "p4/mailer?")
    assert _get(url, "p4", "subscriptions", "mailer").status_code == 200
    deleted = httpbus(url, "sub", "delete", "p4", "mailer", input="y\n")
    assert deleted.exit_code == 0 and "delete subscription p4/mailer?" in deleted.stderr
    assert answered(deleted) == "deleted subscription p4/mailer\n"
    assert _get(url, "p4", "subscriptions", "mailer").status_code == 404
    topic = ("topic", "delete", "p4", "orders")
    declined(httpbus(url, *topic, input="\n"), "delete topic p4/orders, with its messages?")
    assert _get(url, "p4", "topics", "orders").status_code == 200  # Enter: the default, no
    made = as_json(httpbus(url, "token", "create", "p4", "-o", "json"))
    declined(httpbus(url, "token", "revoke", "p4", made["id"], input="n\n"), made["id"])
    declined(httpbus(url, "project", "delete", "p4", input="n\n"), "delete project p4?")
    as_json_too = httpbus(url, *topic, "-o", "json", input="y\n")  # the question on stderr
    assert json.loads(answered(as_json_too))["topic"] == "orders"


def test_without_a_terminal_deletes_need_yes(url: str) -> None:
    _world(url, "p5", "mailer")
    made = as_json(httpbus(url, "token", "create", "p5", "-o", "json"))
    for args in (
        ("project", "delete", "p5"),
        ("topic", "delete", "p5", "orders", "--force"),
        ("sub", "delete", "p5", "mailer"),
        ("token", "revoke", "p5", made["id"]),
    ):
        # "y" on stdin is not an answer: a pipe is never asked
        one_line_error(httpbus(url, *args, input="y\n"), 2, "not a terminal", "--yes")
    assert _get(url, "p5", "subscriptions", "mailer").status_code == 200
    assert _get(url, "p5", "topics", "orders").status_code == 200
    listed = as_json(httpbus(url, "token", "list", "p5", "-o", "json"))["items"]
    assert [t["id"] for t in listed] == [made["id"]]


def _sub(url: str, project: str, name: str) -> dict[str, Any]:
    found: dict[str, Any] = _get(url, project, "subscriptions", name).json()
    return found


def test_sub_update_changes_only_what_is_given(url: str) -> None:
    _world(url, "p6", "mailer")
    before = _sub(url, "p6", "mailer")
    out = ok(
        httpbus(
            url, "sub", "update", "p6", "mailer", "--endpoint", "http://127.0.0.1:9/v2",
            "--max-in-flight", "50", "--backoff", "fixed",
        )
    )  # fmt: skip
    assert out.startswith("updated subscription p6/mailer: ")
    for change in (
        'endpoint.url "http://127.0.0.1:9/hook" → "http://127.0.0.1:9/v2"',
        "max_in_flight 100 → 50",
        'retry.backoff "exponential" → "fixed"',
    ):
        assert change in out, out
    after = _sub(url, "p6", "mailer")
    assert after["retry"]["max_attempts"] == before["retry"]["max_attempts"]
    assert after["endpoint"]["timeout_ms"] == before["endpoint"]["timeout_ms"]
    assert after["version"] > before["version"]

    filtered = as_json(
        httpbus(
            url, "sub", "update", "p6", "mailer", "--filter", 'headers["x-region"] == "eu"',
            "--rate-limit", "5", "--no-dlq", "-o", "json",
        )
    )  # fmt: skip
    assert filtered["filter"] == 'headers["x-region"] == "eu"'
    assert (filtered["rate_limit_per_second"], filtered["dlq_enabled"]) == (5.0, False)
    assert "whsec_" not in str(filtered)
    cleared = as_json(
        httpbus(
            url, "sub", "update", "p6", "mailer", "--no-filter", "--no-rate-limit", "-o", "json"
        )
    )
    assert (cleared["filter"], cleared["rate_limit_per_second"]) == (None, None)
    assert cleared["max_in_flight"] == 50


def test_sub_update_and_delete_errors(url: str) -> None:
    _world(url, "p7", "mailer")
    update = ("sub", "update", "p7", "mailer")
    one_line_error(httpbus(url, *update), 2, "nothing to change")
    one_line_error(httpbus(url, *update, "--filter", "x", "--no-filter"), 2, "not both")
    one_line_error(httpbus(url, *update, "--rate-limit", "1", "--no-rate-limit"), 2, "not both")
    one_line_error(httpbus(url, *update, "--endpoint", "ftp://x"), 1, "422", "endpoint")
    one_line_error(httpbus(url, *update, "--filter", 'headers["x"] =='), 1, "filter", "column")
    assert httpbus(url, *update, "--backoff", "random").exit_code == 2
    assert httpbus(url, *update, "--max-in-flight", "0").exit_code == 2
    one_line_error(httpbus(url, "sub", "update", "p7", "nope", "--max-in-flight", "5"), 3, "404")
    one_line_error(httpbus(url, "sub", "delete", "p7", "nope", "--yes"), 3, "404")
    deleted = as_json(httpbus(url, "sub", "delete", "p7", "mailer", "--yes", "-o", "json"))
    assert deleted == {"deleted": "subscription", "project": "p7", "subscription": "mailer"}


def test_token_create_list_revoke(url: str) -> None:
    _world(url, "p8")
    out = ok(
        httpbus(url, "token", "create", "p8", "--topic", "orders", "--description", "checkout")
    )
    first, second = out.splitlines()
    token_id = first.split()[2]
    assert first == f"created token {token_id} of p8 for topics orders"
    assert second.startswith("token (shown this once): hb")
    plaintext = second.rsplit(" ", 1)[1]

    made = as_json(httpbus(url, "token", "create", "p8", "-o", "json"))
    assert made["topics"] == ["*"] and made["token"] and made["project"] == "p8"
    listed = ok(httpbus(url, "token", "list", "p8"))
    assert token_id in listed and made["id"] in listed and "checkout" in listed
    assert "every topic" in listed and "1–2 of 2" in listed
    assert plaintext not in listed and made["token"] not in listed
    as_list = as_json(httpbus(url, "token", "list", "p8", "-o", "json"))["items"]
    assert {t["id"] for t in as_list} == {token_id, made["id"]}
    assert all("token" not in t for t in as_list)

    assert ok(httpbus(url, "token", "revoke", "p8", token_id, "--yes")).strip() == (
        f"revoked token {token_id} of p8"
    )
    revoked = as_json(httpbus(url, "token", "revoke", "p8", made["id"], "-y", "-o", "json"))
    assert revoked == {"revoked": made["id"], "project": "p8"}
    assert as_json(httpbus(url, "token", "list", "p8", "-o", "json"))["items"] == []
    assert "none (total 0)" in ok(httpbus(url, "token", "list", "p8"))


def test_token_errors(url: str) -> None:
    one_line_error(httpbus(url, "token", "create", "nope"), 3, "404")
    one_line_error(httpbus(url, "token", "list", "nope"), 3, "404")
    _world(url, "p9")
    one_line_error(httpbus(url, "token", "create", "p9", "--topic", "bad name!"), 1, "422")
    one_line_error(httpbus(url, "token", "revoke", "p9", "0123456789ab", "--yes"), 3, "404")
    one_line_error(httpbus(url, "token", "revoke", "p9", "not-an-id", "--yes"), 1, "422")
    one_line_error(httpbus(url, "token", "list", "p9", token="wrong"), 1, "401")


def test_batches_and_a_dedupe_window_from_the_cli(url: str) -> None:
    ok(httpbus(url, "project", "create", "pbd"))
    made = ok(httpbus(url, "topic", "create", "pbd", "once", "--dedupe-window", "10m"))
    assert "created topic pbd/once" in made
    assert _get(url, "pbd", "topics", "once").json()["dedupe_window"] == "10m"
    out = ok(httpbus(url, "topic", "update", "pbd", "once", "--dedupe-window", "1h"))
    assert out.strip() == 'updated topic pbd/once: dedupe_window "10m" → "1h"', out
    off = as_json(
        httpbus(url, "topic", "update", "pbd", "once", "--dedupe-window", "off", "-o", "json")
    )
    assert off["dedupe_window"] is None
    one_line_error(
        httpbus(url, "topic", "update", "pbd", "once", "--dedupe-window", "2d"), 1, "422"
    )

    created = as_json(
        httpbus(
            url, "sub", "create", "pbd", "bulk", "--topic", "once", "--endpoint", HOOK,
            "--batch", "50", "--batch-max-wait-ms", "20", "-o", "json",
        )
    )  # fmt: skip
    assert created["batch"] == {"max_messages": 50, "max_bytes": 1024 * 1024, "max_wait_ms": 20}
    changed = as_json(
        httpbus(url, "sub", "update", "pbd", "bulk", "--batch-max-bytes", "4096", "-o", "json")
    )
    assert changed["batch"] == {"max_messages": 50, "max_bytes": 4096, "max_wait_ms": 20}
    single = as_json(httpbus(url, "sub", "update", "pbd", "bulk", "--no-batch", "-o", "json"))
    assert single["batch"] is None
    one_line_error(
        httpbus(url, "sub", "update", "pbd", "bulk", "--batch", "5", "--no-batch"), 2, "not both"
    )


def test_cloudevents_settings_from_the_cli(url: str) -> None:
    ok(httpbus(url, "project", "create", "pce"))
    made = ok(
        httpbus(
            url, "topic", "create", "pce", "ev", "--grouped",
            "--cloudevents-group-attribute", "subject",
        )
    )  # fmt: skip
    assert "created topic pce/ev" in made
    assert _get(url, "pce", "topics", "ev").json()["cloudevents_group_attribute"] == "subject"
    ok(httpbus(url, "topic", "update", "pce", "ev", "--description", "orders"))
    assert _get(url, "pce", "topics", "ev").json()["cloudevents_group_attribute"] == "subject"
    one_line_error(
        httpbus(url, "topic", "update", "pce", "ev", "--cloudevents-group-attribute", "ID!"),
        1,
        "422",
    )
    created = as_json(
        httpbus(
            url, "sub", "create", "pce", "ce", "--topic", "ev", "--endpoint", HOOK,
            "--delivery-format", "cloudevents-binary", "-o", "json",
        )
    )  # fmt: skip
    assert created["delivery_format"] == "cloudevents-binary"
    kept = as_json(httpbus(url, "sub", "update", "pce", "ce", "--max-in-flight", "5", "-o", "json"))
    assert kept["delivery_format"] == "cloudevents-binary"  # an update keeps what it is not told
    one_line_error(
        httpbus(url, "sub", "update", "pce", "ce", "--batch", "10"), 1, "one event per request"
    )
    changed = as_json(
        httpbus(
            url, "sub", "update", "pce", "ce", "--delivery-format", "cloudevents-structured",
            "--batch", "10", "-o", "json",
        )
    )  # fmt: skip
    assert changed["delivery_format"] == "cloudevents-structured"
    assert changed["batch"]["max_messages"] == 10


def test_sub_create_start(url: str) -> None:
    _world(url, "pstart")
    base = ["sub", "create", "pstart"]
    ok(httpbus(url, *base, "a", "--topic", "orders", "--endpoint", HOOK))
    ok(httpbus(url, *base, "b", "--topic", "orders", "--endpoint", HOOK, "--start", "earliest"))
    at = "2026-01-31T12:00:00Z"
    ok(httpbus(url, *base, "c", "--topic", "orders", "--endpoint", HOOK, "--start", at))
    starts = [_get(url, "pstart", "subscriptions", n).json()["start"] for n in "abc"]
    assert [s["requested"] for s in starts[:2]] == ["latest", "earliest"]
    assert starts[2]["requested"].replace("+00:00", "Z") == at
    bad = httpbus(url, *base, "d", "--topic", "orders", "--endpoint", HOOK, "--start", "soon")
    one_line_error(bad, 2, "--start", "RFC 3339")

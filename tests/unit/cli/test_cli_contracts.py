"""The commands whose APIs other branches build (``sub status|seek|pause|enable``, ``dlq``,
``topic migrate``, ``topic cutover status|abort``, ``tail``) against a fake app with the
contracts' shapes, and against a control plane without those routes (exit 5, "not
available"). ``sub enable`` talks to a stub route added here: its API is built on another
branch."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from cli import kit
from core.errors import NotFound
from tests.support.cli import declined, one_line_error
from tests.support.cli import httpbus as run
from tests.support.contract_api import PHASES, bare_app, dlq_message, fake_app, served


@pytest.fixture
def fake() -> Iterator[tuple[str, Any]]:
    app = fake_app()
    with served(app) as url:
        yield url, app.state.fake


def test_sub_status_text_and_json(fake: tuple[str, Any]) -> None:
    url, _ = fake
    r = run(url, "sub", "status", "shop", "s1")
    assert r.exit_code == 0, r.stderr
    assert "shop/s1: running  worker worker-1  segment 1  circuit open (1/s allowed)" in r.stdout
    assert "lag 4  in flight 2" in r.stdout and "delivered 1.5" in r.stdout
    status = json.loads(run(url, "sub", "status", "shop", "s1", "-o", "json").stdout)
    assert status["totals"]["delivered"] == 20 and len(status["history"]) == 360
    one_line_error(run(url, "sub", "status", "shop", "nope"), 3, "404")


def test_seek_pause_resume_use_the_contract_routes(fake: tuple[str, Any]) -> None:
    url, state = fake
    r = run(url, "sub", "seek", "shop", "s1", "--to", "earliest")
    assert r.exit_code == 0 and "now at segment 2: p0@5, p1@7" in r.stdout
    assert (
        run(url, "sub", "seek", "shop", "s1", "--timestamp", "2026-01-31T12:00:00Z").exit_code == 0
    )
    assert state.seeks == [{"to": "earliest"}, {"timestamp": "2026-01-31T12:00:00Z"}]
    assert run(url, "sub", "pause", "shop", "s1").exit_code == 0 and state.paused is True
    assert run(url, "sub", "resume", "shop", "s1").exit_code == 0 and state.paused is False


def test_dlq_list_unsideline_and_purge(fake: tuple[str, Any]) -> None:
    url, state = fake
    r = run(url, "dlq", "list", "shop", "s1", "--limit", "10")
    assert r.exit_code == 0 and "m000" in r.stdout and "more: --cursor 10" in r.stdout
    page = json.loads(run(url, "dlq", "list", "shop", "s1", "-o", "json", "--cursor", "20").stdout)
    assert [m["message_id"] for m in page["messages"]] == [f"m0{i}" for i in range(20, 25)]
    r = run(url, "dlq", "unsideline", "shop", "s1", "--id", "m000", "--id", "m001")
    assert r.exit_code == 0 and "unsidelined 2" in r.stdout and len(state.dlq) == 23

    state.dlq = [dlq_message(i) for i in range(2500)]
    r = run(
        url,
        "dlq",
        "unsideline",
        "shop",
        "s1",
        "--before",
        "now",
        "--batch",
        "1000",
    )
    assert r.exit_code == 0 and "unsidelined 2500" in r.stdout and state.dlq == []

    state.dlq = [dlq_message(i) for i in range(30)]
    # stdin is not a terminal here: never asked, and without --yes nothing is purged
    one_line_error(run(url, "dlq", "purge", "shop", "s1", "--all", input="y\n"), 2, "--yes")
    assert len(state.dlq) == 30
    r = run(url, "dlq", "purge", "shop", "s1", "--all", "--yes", "--batch", "7", "-o", "json")
    assert r.exit_code == 0 and json.loads(r.stdout) == {"purged": 30} and state.dlq == []


def test_dlq_purge_asks_on_a_terminal(
    fake: tuple[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kit, "stdin_is_terminal", lambda: True)
    url, state = fake
    state.dlq = [dlq_message(i) for i in range(3)]
    refused = run(url, "dlq", "purge", "shop", "s1", "--all", input="n\n")
    declined(refused, "purge the whole DLQ of shop/s1 for good?")
    assert len(state.dlq) == 3
    assert "purged 3" in run(url, "dlq", "purge", "shop", "s1", "--all", input="y\n").stdout


def test_dlq_bad_input(fake: tuple[str, Any]) -> None:
    url, _ = fake
    one_line_error(run(url, "dlq", "purge", "shop", "s1", "--yes"), 2, "choose exactly one")
    one_line_error(
        run(url, "dlq", "unsideline", "shop", "s1", "--id", "a", "--group", "g"), 2, "exactly one"
    )
    one_line_error(run(url, "dlq", "unsideline", "shop", "s1", "--before", "soon"), 2, "RFC 3339")
    one_line_error(run(url, "dlq", "list", "shop", "nope"), 3, "404")
    assert run(url, "dlq", "list", "shop", "s1", "--order", "sideways").exit_code == 2


def test_migrate_shows_each_phase_and_the_acks(fake: tuple[str, Any]) -> None:
    url, _ = fake
    r = run(
        url,
        "topic",
        "migrate",
        "shop",
        "orders",
        "--cluster",
        "pulsar-main",
        "--partitions",
        "8",
        "--interval",
        "0.05",
    )
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "cutover c1: segment 1 → 2"
    phases = [line.split()[1] for line in lines[1:]]
    assert [p for i, p in enumerate(phases) if i == 0 or phases[i - 1] != p] == [
        "PREPARE",
        "SWITCH",
        "COMMIT",
        "COMPLETE",
    ]
    assert lines[-1].startswith("■■■■ COMPLETE") and "committed 2/2" in lines[-1]


def test_migrate_that_rolls_back_exits_7_and_a_second_one_conflicts() -> None:
    app: FastAPI = fake_app(cutover_end="ROLLED_BACK")
    with served(app) as url:
        args = ("topic", "migrate", "shop", "orders", "--cluster", "c", "--partitions", "1")
        one_line_error(run(url, *args, "--interval", "0.05"), 7, "ROLLED_BACK", "did not switch")
        app.state.fake.cutover["phase"] = "SWITCH"
        one_line_error(run(url, *args, "--no-wait"), 4, "409 CUTOVER_IN_PROGRESS")


def test_tail_prints_a_line_per_change(fake: tuple[str, Any]) -> None:
    url, _ = fake
    r = run(url, "tail", "shop", "s1", "--count", "3", "--interval", "0.05")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3
    assert "delivered 10 (+0)" in lines[0] and "delivered 30 (+10)" in lines[2]
    assert "circuit open" in lines[0] and "lag 4" in lines[0]
    as_json = run(url, "tail", "shop", "s1", "--count", "2", "--interval", "0.05", "-o", "json")
    assert [json.loads(x)["totals"]["delivered"] for x in as_json.stdout.splitlines()] == [40, 50]


def test_without_those_apis_commands_exit_5() -> None:
    with served(bare_app()) as url:
        for args in (
            ("sub", "status", "shop", "s1"),
            ("sub", "seek", "shop", "s1", "--to", "latest"),
            ("dlq", "list", "shop", "s1"),
            ("dlq", "purge", "shop", "s1", "--all", "--yes"),
            ("topic", "migrate", "shop", "orders", "--cluster", "c", "--partitions", "1"),
            ("tail", "shop", "s1", "--count", "1"),
        ):
            one_line_error(run(url, *args), 5, "not available")


def test_sub_status_lists_the_shards_of_a_sharded_subscription(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from cli.sub import print_status

    shards = [
        {"shard": 0, "worker": "w-a", "state": "running", "lag": 3},
        {"shard": 1, "worker": None, "state": "unassigned", "lag": 9},
    ]
    status = {"subscription": "shop/big", "state": "running", "lag": 12, "in_flight": 0}
    print_status({**status, "partitions": [], "shards": shards})
    cells = [
        [c for c in line.replace("│", " ").replace("┃", " ").split()]
        for line in capsys.readouterr().out.splitlines()
    ]
    assert ["0", "w-a", "running", "3"] in cells
    assert ["1", "-", "unassigned", "9"] in cells


def _start_cutover(url: str) -> None:
    args = ("topic", "migrate", "shop", "orders", "--cluster", "pulsar-main", "--partitions", "8")
    assert run(url, *args, "--no-wait").exit_code == 0


def test_cutover_status_shows_phases_times_and_acks(fake: tuple[str, Any]) -> None:
    url, _ = fake
    one_line_error(run(url, "topic", "cutover", "status", "shop", "orders"), 3, "404")
    _start_cutover(url)
    r = run(url, "topic", "cutover", "status", "shop", "orders")  # the fake acks PREPARE now
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "cutover c1 of shop/orders: segment 1 → 2 (pulsar-main, 8 partition(s))"
    assert lines[1].startswith("phase PREPARE  started 2026-11-22 06:00:00.000")
    assert any("PREPARE" in line and "+0.000 s" in line for line in lines), r.stdout
    acks = [line for line in lines if "producer-a" in line or "producer-b" in line]
    assert len(acks) == 2 and all(line.count("+0.000 s") == 1 for line in acks), r.stdout

    shown = json.loads(
        run(url, "topic", "cutover", "status", "shop", "orders", "-o", "json").stdout
    )
    assert shown["phase"] == "SWITCH" and set(shown["phase_times"]) == {"PREPARE", "SWITCH"}
    assert shown["producers"]["producer-a"]["prepared_at"] is not None


def test_cutover_status_watch_follows_until_complete(fake: tuple[str, Any]) -> None:
    url, _ = fake
    _start_cutover(url)
    r = run(url, "topic", "cutover", "status", "shop", "orders", "--watch", "--interval", "0.05")
    assert r.exit_code == 0, r.stderr
    bars = [line.split()[1] for line in r.stdout.splitlines() if line.startswith(("■", "□"))]
    assert [p for i, p in enumerate(bars) if i == 0 or bars[i - 1] != p] == [
        "PREPARE",
        "SWITCH",
        "COMMIT",
        "COMPLETE",
    ]
    assert "phase COMPLETE" in r.stdout  # then the full status
    _start_cutover(url)
    args = ("topic", "cutover", "status", "shop", "orders", "-w", "--interval", "0.05")
    final = json.loads(run(url, *args, "-o", "json").stdout)
    assert final["phase"] == "COMPLETE" and set(final["phase_times"]) == set(PHASES)


def test_cutover_watch_exits_7_on_roll_back_and_abort_conflicts_after_commit() -> None:
    app: FastAPI = fake_app(cutover_end="ROLLED_BACK")
    with served(app) as url:
        _start_cutover(url)
        watch = ("topic", "cutover", "status", "shop", "orders", "--watch", "--interval", "0.05")
        one_line_error(run(url, *watch), 7, "ROLLED_BACK", "did not switch")
        app.state.fake.cutover["phase"] = "COMMIT"
        one_line_error(run(url, "topic", "cutover", "abort", "shop", "orders"), 4, "409")


def test_cutover_abort(fake: tuple[str, Any]) -> None:
    url, state = fake
    one_line_error(run(url, "topic", "cutover", "abort", "shop", "orders"), 3, "404")
    _start_cutover(url)
    r = run(url, "topic", "cutover", "abort", "shop", "orders")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == "cutover c1 of shop/orders: ABORTED; the topic stays on segment 1"
    assert state.cutover["phase"] == "ABORTED"
    again = json.loads(run(url, "topic", "cutover", "abort", "shop", "orders", "-o", "json").stdout)
    assert again["phase"] == "ABORTED" and again["id"] == "c1"
    status = ("topic", "cutover", "status", "shop", "orders", "--watch")
    one_line_error(run(url, *status), 7, "ABORTED")


def with_enable(app: FastAPI) -> list[str]:
    """A stub of ``POST …/subscriptions/{s}/enable`` (built on another branch): the names it
    enabled."""
    enabled: list[str] = []

    @app.post("/v1/projects/{p}/subscriptions/{s}/enable")
    def enable(p: str, s: str) -> Any:
        if s != "s1":
            raise NotFound(f"subscription {p}/{s} does not exist")
        enabled.append(f"{p}/{s}")
        return {"project": p, "name": s, "paused": False}

    return enabled


def test_sub_enable() -> None:
    app = fake_app()
    enabled = with_enable(app)
    with served(app) as url:
        assert run(url, "sub", "enable", "shop", "s1").stdout == "shop/s1 enabled\n"
        shown = json.loads(run(url, "sub", "enable", "shop", "s1", "-o", "json").stdout)
        assert shown["name"] == "s1" and enabled == ["shop/s1", "shop/s1"]
        one_line_error(run(url, "sub", "enable", "shop", "nope"), 3, "404")


def test_new_commands_without_their_apis_exit_5() -> None:
    with served(bare_app()) as url:
        for args in (
            ("sub", "enable", "shop", "s1"),
            ("topic", "cutover", "status", "shop", "orders"),
            ("topic", "cutover", "abort", "shop", "orders"),
            ("token", "list", "shop"),
        ):
            one_line_error(run(url, *args), 5, "not available")

"""``httpbus overview`` against a real control plane (embedded backends, served over HTTP):
the five answers as text and as JSON, ``--watch`` redrawing until ``--count`` draws, and
Ctrl-C ending a watch with exit 0."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli.overview import render
from tests.support.cli import TOKEN, httpbus, ok, shop_control_plane_url

SECTIONS = ("FAILING (", "LAG (", "DLQ GROWING", "DISABLED (", "BEING MOVED (")


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shop_control_plane_url(tmp_path_factory.mktemp("overview")) as base:
        ok(
            httpbus(
                base,
                "sub",
                "create",
                "shop",
                "mailer",
                "--topic",
                "orders",
                "--endpoint",
                "http://127.0.0.1:9/hook",
            )
        )
        yield base


def test_overview_prints_the_five_answers(url: str) -> None:
    out = ok(httpbus(url, "overview"))
    assert "1 subscription(s) in 1 project(s)" in out
    assert all(heading in out for heading in SECTIONS), out
    seen = json.loads(ok(httpbus(url, "overview", "-o", "json")))
    assert seen["projects"] == ["shop"] and seen["subscriptions"] == 1


def test_watch_redraws_until_the_count(url: str) -> None:
    out = ok(httpbus(url, "overview", "--watch", "--count", "3", "--interval", "0.05"))
    assert out.count("httpbus overview at") == 3
    assert out.count("-" * 30) == 4  # a dated rule above the 2nd and the 3rd draw
    lines = ok(httpbus(url, "overview", "-w", "--count", "2", "--interval", "0.05", "-o", "json"))
    assert [json.loads(x)["subscriptions"] for x in lines.splitlines()] == [1, 1]


def test_watch_ends_on_ctrl_c_with_exit_0(url: str) -> None:
    env = {**os.environ, "HTTPBUS_URL": url, "HTTPBUS_ADMIN_TOKEN": TOKEN, "HTTPBUS_TOKEN": ""}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    # As a terminal starts it: Ctrl-C raises KeyboardInterrupt even if this test runs where
    # SIGINT is ignored (a shell's `&` without job control), which a child would inherit.
    start = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler);"
        " sys.argv = ['httpbus', 'overview', '--watch', '--interval', '0.1'];"
        " runpy.run_module('cli', run_name='__main__')"
    )
    command = [sys.executable, "-c", start]
    pipe = subprocess.PIPE
    with subprocess.Popen(command, stdout=pipe, stderr=pipe, text=True, env=env) as proc:
        try:
            assert proc.stdout is not None
            deadline = time.monotonic() + 30
            drawn = 0
            while drawn < 2 and time.monotonic() < deadline:  # two draws: it is watching
                line = proc.stdout.readline()
                drawn += line.startswith("httpbus overview at")
            assert drawn == 2
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_render_names_every_row_with_its_figures() -> None:
    seen = {
        "at": "2026-01-01T00:00:00Z",
        "subscriptions": 3,
        "projects": ["shop"],
        "rates": {"published_per_s": None, "delivered_per_s": 1.0, "failed_per_s": 2.0},
        "failing": [
            {
                "project": "shop",
                "subscription": "a",
                "circuit": "half_open",
                "failed_per_s": 2.0,
                "failures": {"500": 7},
                "last_failure": {"status": 500, "error": "HTTP 500: boom"},
            }
        ],
        "lag": [{"project": "shop", "subscription": "b", "lag": 42, "oldest_unacked_at": None}],
        "dlq_growing": [{"project": "shop", "subscription": "c", "last_hour": 961, "last_at": "x"}],
        "disabled": [
            {"project": "shop", "subscription": "d", "failing_since": "y", "last_error": "503"}
        ],
        "in_flight": {
            "cutovers": [
                {
                    "project": "shop",
                    "topic": "t",
                    "phase": "SWITCH",
                    "from_segment": 1,
                    "to_segment": 2,
                }
            ],
            "failovers": [{"project": "shop", "topic": "u", "segment": 3}],
            "migrations": [],
        },
        "audit": None,
    }
    text = render(seen)
    assert "published measuring/s" in text
    assert "shop/a" in text and "circuit half-open" in text and "500×7" in text
    assert "HTTP 500: boom" in text and "lag 42" in text and "+961" in text
    assert "shop/d" in text and "SWITCH segment 1 -> 2" in text and "segment 3 unsealed" in text

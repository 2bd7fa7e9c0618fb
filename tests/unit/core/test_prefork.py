"""``core.prefork``: N processes on one port, restarted when they die, stopped together, and
one scrape for all of them (``core.metrics_group``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from core.prefork import Slot, cpu_count, member_of, resolve_processes
from tests.support.processes import free_port
from tests.support.until import until_sync

ROOT = Path(__file__).parents[3]


@pytest.fixture(name="group")
def group_fixture() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.prefork_app", str(port), "2"], cwd=ROOT
    )
    url = f"http://127.0.0.1:{port}"
    try:
        until_sync(lambda: len(_pids(url)) == 2, 30, "both processes answer")
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _pids(url: str, tries: int = 40) -> set[int]:
    """The processes that answered ``tries`` requests, each on a new connection."""
    seen: set[int] = set()
    for _ in range(tries):
        try:
            seen.add(int(httpx.get(f"{url}/pid", timeout=2).text))
        except httpx.HTTPError:
            pass
    return seen


def test_two_processes_share_the_port_and_one_scrape_shows_both(
    group: tuple[subprocess.Popen[bytes], str],
) -> None:
    _, url = group
    assert len(_pids(url)) == 2
    text = httpx.get(f"{url}/metrics", timeout=5).text
    assert 'served_total{process="0"}' in text
    assert 'served_total{process="1"}' in text
    total = sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("served_total{")
    )
    assert total >= 40  # every request of both processes is counted once, wherever served


def test_a_process_that_dies_is_started_again(
    group: tuple[subprocess.Popen[bytes], str],
) -> None:
    _, url = group
    victim = min(_pids(url))
    os.kill(victim, signal.SIGKILL)
    until_sync(lambda: len(pids := _pids(url)) == 2 and victim not in pids, 30, "a second process")


def test_sigterm_stops_every_process_and_the_supervisor_exits_cleanly(
    group: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, url = group
    children = _pids(url)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(20) == 0
    for pid in children:
        until_sync(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10, f"{pid} ended")


def test_a_killed_supervisor_takes_its_processes_with_it(
    group: tuple[subprocess.Popen[bytes], str],
) -> None:
    proc, url = group
    children = _pids(url)
    proc.kill()
    proc.wait(10)
    for pid in children:  # PR_SET_PDEATHSIG: no orphan keeps the port
        until_sync(lambda pid=pid: not Path(f"/proc/{pid}").exists(), 10, f"{pid} ended")


def test_member_ids_and_counts() -> None:
    assert member_of("worker-a", None) == "worker-a"
    assert member_of("worker-a", Slot(1, 2, Path("/tmp"))) == "worker-a-1"
    assert resolve_processes(3) == 3
    assert resolve_processes("auto") == cpu_count() >= 1

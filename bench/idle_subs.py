"""One delivery worker holding N idle subscriptions on real ZooKeeper and Kafka (issue 35).

    .venv/bin/python bench/idle_subs.py [--sizes 0,200,1000,2000] [--per-topic 10,1]
        [--idle-s 120] [--services-file /tmp/httpbus-services/state.json]

For each size N and each ``--per-topic`` k (subscriptions sharing one topic):

1. creates N/k topics in one project, each a Kafka storage topic of ``--partitions``
   partitions, and N subscriptions (k per topic) through :class:`metastore.catalog.Catalog`,
   under a ZooKeeper root of its own;
2. starts ONE real worker process (``python -m delivery_workers``) and writes its assignment
   (every subscription) itself, as the control plane's leader would;
3. waits (bounded by ``--ready-timeout-s``) until the worker runs all N: each subscription's
   status node names its consume segment, which a runner sets once it reads;
4. lets it settle ``--settle-s``, then over ``--idle-s`` measures the worker process: RSS and
   threads (``/proc/<pid>/status``), CPU-seconds (``/proc/<pid>/stat``, every thread), its
   sockets, the requests its ZooKeeper connection sent (the server's own ``stat`` counts
   packets received per connection) and the TCP data segments it sent to Kafka (``ss -ti``
   per connection: about one per request, librdkafka sends small requests one per segment),
   and the Kafka broker's CPU over the same window (its pid from the services file).

The start storm is measured at the moment all N run: the worker's CPU-seconds since it
started, the requests its ZooKeeper connection sent so far, the Kafka segments of its live
connections (those of readers closed meanwhile are lost to it) and the warnings it logged.

Every subscription's endpoint is a trivial local HTTP server of the bench (200 to all);
after the window one message is stored in the first topic and the bench waits (bounded)
until each of that topic's k subscriptions delivered it: the subscriptions are live, not
only listed. A size of 0 (``--sizes 0,2000``) is a baseline run: one topic, no subscription;
the per-subscription figures then subtract it (else memory subtracts a bare import). On the
way out it stops the worker, deletes the storage topics and the root. Figures only; no
assertion.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _support as s
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.envelope import MESSAGE_ID, PRODUCED_AT  # noqa: E402
from core.model import Backend, Endpoint, Project, Segment, Subscription, Topic  # noqa: E402
from metastore import paths  # noqa: E402
from metastore.catalog import Catalog  # noqa: E402
from metastore.config import ZooKeeperConfig, open_metastore  # noqa: E402
from metastore.protocol import MetaStore  # noqa: E402
from segments.config import KafkaClusterConfig  # noqa: E402
from segments.protocol import Record, SegmentStore  # noqa: E402
from segments.registry import open_store  # noqa: E402

CLUSTER = "kafka-main"
PROJECT = "idle"
IN_FLIGHT = 32  # creations at once
SECRET = "whsec_" + "A" * 32


@dataclass
class Sample:
    """What the worker process had used at one moment."""

    at: float
    cpu_s: float
    rss_mb: float
    threads: int
    sockets: int
    zk_sent: int  # packets the ZooKeeper server received from the worker's connection(s)
    kafka_segs: dict[int, int]  # TCP data segments sent to Kafka, by local port


def proc_sample(pid: int, zk: str, kafka_port: int) -> Sample:
    status = Path(f"/proc/{pid}/status").read_text()
    rss_kb = int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    threads = int(re.search(r"Threads:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
    sockets = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            sockets += os.readlink(fd).startswith("socket:")
    ports, kafka = _connections(pid, kafka_port)
    return Sample(
        time.monotonic(),
        s.session_cpu_s(pid),
        rss_kb / 1024,
        threads,
        sockets,
        _zk_received(zk, ports),
        kafka,
    )


def _connections(pid: int, kafka_port: int) -> tuple[set[int], dict[int, int]]:
    """The local ports of ``pid``'s TCP connections, and the data segments it sent on each
    of those to ``kafka_port`` (``ss -tinp``: info lines follow each connection's line)."""
    out = subprocess.run(
        ["ss", "-tinpH", "state", "established"], capture_output=True, text=True, timeout=30
    ).stdout
    ports: set[int] = set()
    segs: dict[int, int] = {}
    current_kafka: int | None = None
    for line in out.splitlines():
        if not line.startswith((" ", "\t")):
            current_kafka = None
            if f"pid={pid}," not in line:
                continue
            fields = line.split()
            local, peer = fields[2], fields[3]
            port = int(local.rpartition(":")[2])
            ports.add(port)
            if peer.endswith(f":{kafka_port}"):
                segs[port] = 0
                current_kafka = port
        elif current_kafka is not None:
            if m := re.search(r"data_segs_out:(\d+)", line):
                segs[current_kafka] = int(m.group(1))
            current_kafka = None
    return ports, segs


def _zk_received(zk: str, ports: set[int]) -> int:
    """Packets the ZooKeeper server received from the connections whose local port is in
    ``ports`` (its ``stat`` lists ``/127.0.0.1:PORT[1](queued=..,recved=N,sent=..)``)."""
    host, _, port = zk.partition(":")
    chunks = []
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"stat")
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    text = b"".join(chunks).decode(errors="replace")
    total = 0
    for m in re.finditer(r"/[\d.]+:(\d+)\[\d+\]\(.*?recved=(\d+)", text):
        if int(m.group(1)) in ports:
            total += int(m.group(2))
    return total


class Receiver:
    """A trivial local endpoint: answers 200 to every request and counts them by path."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}
        self.port = 0
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Receiver:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, ValueError):
            while head := await reader.readuntil(b"\r\n\r\n"):
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split()[1]
                length = next(
                    (
                        int(x.split(":", 1)[1])
                        for x in lines
                        if x.lower().startswith("content-length:")
                    ),
                    0,
                )
                await reader.readexactly(length)
                self.seen[path] = self.seen.get(path, 0) + 1
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
        writer.close()


async def _bounded(coros: list[Any], limit: int = IN_FLIGHT) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with gate:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


class Run:
    """One (N, k) run: its metadata, topics and worker."""

    def __init__(
        self, args: argparse.Namespace, endpoints: s.Endpoints, n: int, k: int, port: int
    ) -> None:
        self.args, self.endpoints, self.n, self.k, self.port = args, endpoints, n, k, port
        self.tag = f"idle-{secrets.token_hex(4)}"
        self.zk = ZooKeeperConfig(hosts=endpoints.zookeeper, root=f"/{self.tag}")
        self.kafka = KafkaClusterConfig(bootstrap_servers=endpoints.kafka)
        self.topics = [f"t{i:05d}" for i in range(max(1, n // k))]
        self.subs = [f"s{i:05d}" for i in range(n)]
        self.storage = {t: f"{self.tag}.{t}" for t in self.topics}

    async def create(self, catalog: Catalog, store: SegmentStore) -> float:
        started = time.monotonic()
        await catalog.create_project(Project(name=PROJECT))

        async def topic(t: str) -> None:
            await store.create_topic(self.storage[t], self.args.partitions, retention_ms=3_600_000)
            seg = Segment(
                id=1,
                cluster=CLUSTER,
                backend=Backend.KAFKA,
                storage_topic=self.storage[t],
                partitions=self.args.partitions,
            )
            await catalog.create_topic(Topic(project=PROJECT, name=t, grouped=False), seg)

        await _bounded([topic(t) for t in self.topics])

        async def sub(i: int, name: str) -> None:
            await catalog.create_subscription(
                Subscription(
                    project=PROJECT,
                    name=name,
                    topic_project=PROJECT,
                    topic=self.topics[i % len(self.topics)],
                    endpoint=Endpoint(url=f"http://127.0.0.1:{self.port}/{name}"),
                    signing_secret=SECRET,
                )
            )

        await _bounded([sub(i, n) for i, n in enumerate(self.subs)])
        return time.monotonic() - started

    def start_worker(self, workdir: Path) -> subprocess.Popen[bytes]:
        settings = {
            "metastore": self.zk.model_dump(),
            "clusters": {CLUSTER: self.kafka.model_dump()},
            "member_id": "w-idle",
            "endpoint_policy": {"allow_private_networks": True},  # the bench's own endpoint
            "port": s.free_port(),
        }
        config = workdir / f"{self.tag}.yaml"
        config.write_text(yaml.safe_dump(settings))
        self.log = workdir / f"{self.tag}.log"
        with self.log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "delivery_workers", "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
                start_new_session=True,
            )

    async def deliver_one(self, store: SegmentStore, receiver: Receiver) -> tuple[int, float]:
        """Store one message in the first topic; how many of its subscriptions delivered it
        (bounded by ``--deliver-timeout-s``), and the seconds until the last did."""
        mine = [f"/{name}" for i, name in enumerate(self.subs) if i % len(self.topics) == 0]
        if not mine:
            return 0, 0.0
        before = {path: receiver.seen.get(path, 0) for path in mine}
        now_ms = int(time.time() * 1000)
        headers = ((MESSAGE_ID, b"idle-check"), (PRODUCED_AT, str(now_ms).encode()))
        started = time.monotonic()
        await store.produce(self.storage[self.topics[0]], Record(b"{}", headers=headers))
        deadline = started + self.args.deliver_timeout_s
        while True:
            done = sum(receiver.seen.get(path, 0) > before[path] for path in mine)
            if done == len(mine) or time.monotonic() > deadline:
                return done, time.monotonic() - started
            await asyncio.sleep(0.1)

    async def running(self, meta: MetaStore) -> int:
        """How many subscriptions' status nodes name a consume segment (a runner reads)."""
        keys = [f"{PROJECT}/{name}" for name in self.subs]
        count = 0
        for i in range(0, len(keys), 200):
            nodes = await asyncio.gather(
                *(meta.get(paths.unit_status(k)) for k in keys[i : i + 200])
            )
            for node in nodes:
                if node is not None and json.loads(node.data).get("segment") is not None:
                    count += 1
        return count


async def run_one(
    args: argparse.Namespace, endpoints: s.Endpoints, workdir: Path, n: int, k: int
) -> dict[str, Any]:
    async with Receiver() as receiver:
        run = Run(args, endpoints, n, k, receiver.port)
        try:
            return await _measure(run, workdir, n, receiver)
        finally:
            s.drop_zookeeper_root(endpoints.zookeeper, run.tag)


def _warnings(log: Path) -> int:
    """Lines the worker logged at WARNING or above so far."""
    text = log.read_text(errors="replace")
    return sum(1 for line in text.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line))


def _kafka_sent(segs: dict[int, int], since: dict[int, int] | None = None) -> int:
    """Segments sent on each connection since ``since`` (a connection new since counts from 0)."""
    base = since or {}
    return sum(n - base.get(port, 0) for port, n in segs.items())


async def _measure(run: Run, workdir: Path, n: int, receiver: Receiver) -> dict[str, Any]:
    args, endpoints, k = run.args, run.endpoints, run.k
    kafka_port = int(endpoints.kafka.rpartition(":")[2])
    load_before = s.load_average()
    async with open_metastore(run.zk) as meta, open_store(run.kafka) as store:
        catalog = Catalog(meta)
        proc: subprocess.Popen[bytes] | None = None
        try:
            created_s = await run.create(catalog, store)
            print(f"  created {len(run.topics)} topics and {n} subscriptions in {created_s:.1f} s")
            proc = run.start_worker(workdir)
            keys = [f"{PROJECT}/{name}" for name in run.subs]
            await meta.create(paths.assignment("w-idle"), json.dumps(keys).encode())
            started = time.monotonic()
            deadline = started + args.ready_timeout_s
            count = 0
            while time.monotonic() < deadline:
                if proc.poll() is not None:
                    raise RuntimeError(f"worker exited: {run.log.read_text()[-2000:]}")
                count = await run.running(meta)
                if count == n:
                    break
                await asyncio.sleep(2)
            ready_s = time.monotonic() - started
            if count < n:
                raise RuntimeError(f"only {count}/{n} running after {args.ready_timeout_s} s")
            storm = proc_sample(proc.pid, endpoints.zookeeper, kafka_port)
            storm_warnings = _warnings(run.log)
            print(
                f"  all {n} running after {ready_s:.1f} s ({storm.cpu_s:.1f} CPU-s, "
                f"{storm.zk_sent} ZooKeeper requests, {_kafka_sent(storm.kafka_segs)} Kafka "
                f"segments on live connections, {storm_warnings} warnings); "
                f"settling {args.settle_s} s"
            )
            await asyncio.sleep(args.settle_s)
            broker = s.server_pid(args.services_file, "kafka")
            a = proc_sample(proc.pid, endpoints.zookeeper, kafka_port)
            broker_a = s.session_cpu_s(broker) if broker else math.nan
            load_start = s.load_average()
            await asyncio.sleep(args.idle_s)
            b = proc_sample(proc.pid, endpoints.zookeeper, kafka_port)
            broker_b = s.session_cpu_s(broker) if broker else math.nan
            load_end = s.load_average()
            still = await run.running(meta)
            delivered, deliver_s = await run.deliver_one(store, receiver)
            print(f"  one message: delivered to {delivered}/{k if n else 0} in {deliver_s:.1f} s")
            window = b.at - a.at
            return {
                "n": n,
                "per_topic": k,
                "topics": len(run.topics),
                "ready_s": ready_s,
                "running_after": still,
                "storm_cpu_s": storm.cpu_s,
                "storm_zk": storm.zk_sent,
                "storm_kafka": _kafka_sent(storm.kafka_segs),
                "storm_warnings": storm_warnings,
                "delivered": delivered,
                "deliver_s": deliver_s,
                "window_s": window,
                "rss_mb": b.rss_mb,
                "threads": b.threads,
                "sockets": b.sockets,
                "cpu_s": b.cpu_s - a.cpu_s,
                # The whole broker's, whoever else uses it (nothing else should, then).
                "broker_cpu_s": broker_b - broker_a,
                "zk_per_s": (b.zk_sent - a.zk_sent) / window,
                # Per connection: one opened in the window counts from zero; one closed in
                # it loses what it sent then (readers evicted and made again: see opened).
                "kafka_per_s": _kafka_sent(b.kafka_segs, a.kafka_segs) / window,
                "kafka_opened": len(b.kafka_segs.keys() - a.kafka_segs.keys()),
                "load": (load_before, load_start, load_end),
            }
        finally:
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
            with s.warn_on_error("delete the storage topics"):
                await _bounded([store.delete_topic(t) for t in run.storage.values()])
            with s.warn_on_error("delete the ZooKeeper root"):
                for child in await meta.children("/"):
                    await meta.delete(f"/{child}", recursive=True)


def baseline_rss_mb() -> float:
    """RSS of a bare ``python -c 'import delivery_workers.app'`` (the interpreter and the
    libraries a worker loads before it holds anything), for the per-subscription share."""
    code = (
        "import delivery_workers.app, re, pathlib;"
        "print(re.search(r'VmRSS:\\s+(\\d+)', pathlib.Path('/proc/self/status').read_text())[1])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    return int(out.stdout.strip()) / 1024


def report(rows: list[dict[str, Any]], base_mb: float) -> None:
    print(f"\nbaseline: a process that imported the worker's app holds {base_mb:.0f} MB RSS")
    zero = next((r for r in rows if r["n"] == 0), None)
    if zero is not None:
        print("per-subscription figures subtract the N=0 run (a worker holding nothing)")
    base = zero or {"rss_mb": base_mb, "cpu_s": 0.0, "window_s": 1.0, "zk_per_s": 0.0}
    base_cpu = base["cpu_s"] / base["window_s"]
    headers = [
        "N", "per topic", "ready s", "start CPU-s", "start ZK req", "start warnings",
        "RSS MB", "KB/sub", "CPU s/s", "CPU ms/s per sub", "ZK req/s", "ZK req/s per 1k sub",
        "Kafka segs/s", "Kafka conns opened", "broker CPU s/s", "threads", "sockets",
        "delivered",
        "load (before, start, end)",
    ]  # fmt: skip
    table = []
    for r in rows:
        cpu, per = r["cpu_s"] / r["window_s"], max(1, r["n"])
        table.append([
            str(r["n"]), str(r["per_topic"]), s.fmt(r["ready_s"]), s.fmt(r["storm_cpu_s"]),
            str(r["storm_zk"]), str(r["storm_warnings"]), s.fmt(r["rss_mb"]),
            s.fmt((r["rss_mb"] - base["rss_mb"]) * 1024 / per), s.fmt(cpu, 3),
            s.fmt((cpu - base_cpu) * 1000 / per, 3), s.fmt(r["zk_per_s"]),
            s.fmt((r["zk_per_s"] - base["zk_per_s"]) * 1000 / per), s.fmt(r["kafka_per_s"]),
            str(r["kafka_opened"]), s.fmt(r["broker_cpu_s"] / r["window_s"], 3),
            str(r["threads"]), str(r["sockets"]),
            f"{r['delivered']} in {r['deliver_s']:.1f} s",
            ", ".join(f"{x:.1f}" for x in r["load"]),
        ])  # fmt: skip
    s.print_table(headers, table)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="200,1000,2000", help="subscriptions per run")
    p.add_argument("--per-topic", default="10,1", help="subscriptions sharing a topic")
    p.add_argument("--partitions", type=int, default=1, help="of each storage topic")
    p.add_argument("--idle-s", type=float, default=120.0, help="the measured idle window")
    p.add_argument("--settle-s", type=float, default=15.0, help="after all run, before it")
    p.add_argument("--ready-timeout-s", type=float, default=600.0)
    p.add_argument("--deliver-timeout-s", type=float, default=60.0, help="for the one message")
    p.add_argument("--services-file", type=Path, default=Path("/tmp/httpbus-services/state.json"))
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    endpoints, workdir = s.bench_setup(args, "httpbus-idle-")
    print(f"workdir {workdir}; load average {s.load_average():.1f}")
    rows: list[dict[str, Any]] = []

    def run() -> None:
        for k in [int(x) for x in args.per_topic.split(",")]:
            for n in [int(x) for x in args.sizes.split(",")]:
                print(f"N={n}, {k} per topic")
                try:
                    rows.append(asyncio.run(run_one(args, endpoints, workdir, n, k)))
                except RuntimeError as exc:
                    print(f"  FAILED: {exc}")

    finished = s.ran_to_the_end(run)
    report(rows, baseline_rss_mb())
    return 0 if finished else 130


if __name__ == "__main__":
    sys.exit(main())

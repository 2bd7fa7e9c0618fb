"""The delivery benchmark: one worker process pushing to a minimal fast receiver.

In one run, against the real ZooKeeper, Kafka and Pulsar on 127.0.0.1, it starts as processes
of their own the control plane, the producer service, one delivery worker and the receiver
(asyncio Protocols on uvloop + httptools: it notes the arrival time of each message id and
answers 204). Per backend:

- *throughput, ungrouped*: N messages are produced (batch produce) to a paused subscription,
  which is then started; delivered msgs/s = N / (last arrival - start);
- *throughput, grouped*: the same on a grouped topic, messages spread over ``--groups`` groups;
- *latency*: the subscription runs while messages are produced at ``--rate`` msgs/s (batches
  of 10); end-to-end latency = arrival at the receiver - the producer's 2xx, p50/p99/p99.9;
- *raw consumer*: the client library (confluent-kafka, pulsar-client) reading the ungrouped
  run's storage topic from the start: the ceiling a worker could reach; the ratio is printed.

With ``--processes N --shards N`` the worker runs N processes (``core/prefork.py``) and each
subscription has N shards, so every process holds one; the worker's CPU is the whole process
group's. With ``--batch N`` (N > 1) the subscriptions deliver in batches of up to N messages
(``batch: {max_messages: N, max_wait_ms: 100}``); the receiver counts every message of a
batch's JSON array. ``--throughput-only`` skips the latency and raw-consumer runs. To compare::

    .venv/bin/python bench/deliver.py --backend kafka --messages 10000 --throughput-only
    .venv/bin/python bench/deliver.py --backend kafka --messages 10000 --throughput-only --batch 50

It prints figures, never asserts them. Everything it starts is stopped and everything it
creates is deleted at the end, also on Ctrl-C. Usage::

    .venv/bin/python bench/deliver.py --backend both --messages 20000 --rate 1000
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _support as s
import httpx
import yaml
from _support import CLUSTERS, Cpu, Endpoints, Server

BENCH_DIR = Path(__file__).resolve().parent
UNTHROTTLED = {"max_qps": 1_000_000, "max_bytes_per_second": 1024**3}
BATCH = 500
# The receiver listens on loopback, which the endpoint policy refuses by default.
LOOPBACK = {"endpoint_policy": {"allow_private_networks": True}}


@dataclass
class Row:
    scenario: str
    msgs_per_s: float
    p50_ms: float = math.nan
    p99_ms: float = math.nan
    p999_ms: float = math.nan
    worker_cpu: float = math.nan
    host_cpu: float = math.nan
    note: str = ""
    load: float = math.nan  # the 1-minute load average just before the run


class Bench(s.BenchRun):
    """One run: names, processes, figures."""

    def __init__(self, args: argparse.Namespace, endpoints: Endpoints, workdir: Path) -> None:
        super().__init__(args, endpoints, workdir)
        self.rows: list[Row] = []
        self.payload = "x" * args.size
        self.topics: list[str] = []
        self.admin: httpx.Client | None = None
        self.producer_url = self.receiver_url = ""
        self.worker: Server | None = None

    # ------------------------------------------------------------ services
    def settings(self) -> dict[str, Any]:
        e = self.endpoints
        return {
            "metastore": {"kind": "zookeeper", "hosts": e.zookeeper, "root": f"/{self.tag}"},
            "clusters": {
                "kafka-main": {"backend": "kafka", "bootstrap_servers": e.kafka},
                "pulsar-main": {
                    "backend": "pulsar",
                    "service_url": e.pulsar,
                    "admin_url": e.pulsar_admin,
                },
            },
        }

    def server(self, name: str, settings: dict[str, Any] | None, *argv: str | Path) -> Server:
        port = s.free_port()
        command = [sys.executable, *map(str, argv)]
        if settings is not None:
            config = self.workdir / f"{name}.yaml"
            config.write_text(yaml.safe_dump(settings))
            command += ["--config", str(config)]
        return Server(name, [*command, "--port", str(port)], port, self.workdir / f"{name}.log")

    @contextlib.contextmanager
    def services(self) -> Iterator[None]:
        common = self.settings()
        control = {
            **common,
            "admin_token": self.token,
            "default_cluster": "kafka-main",
            "storage_topic_prefix": self.tag,
            "assign_interval_s": 0.5,
            **LOOPBACK,
        }
        producer = {**common, "admin_token": self.token}
        worker = {
            **common,
            **LOOPBACK,
            "member_id": f"{self.tag}-w1",
            "sender": self.args.sender,
        }
        with contextlib.ExitStack() as stack:
            stack.callback(self.drop_metadata)
            receiver = stack.enter_context(
                self.server("receiver", None, BENCH_DIR / "deliver.py", "receiver")
            )
            cp = stack.enter_context(self.server("control-plane", control, "-m", "control_plane"))
            prod = stack.enter_context(self.server("producer", producer, "-m", "producer_api"))
            self.worker = stack.enter_context(
                self.server(
                    "worker", worker, "-m", "delivery_workers", "--processes", self.args.processes
                )
            )
            self.admin = stack.enter_context(
                httpx.Client(
                    base_url=cp.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60
                )
            )
            stack.callback(self.drop_topics)
            s.expect(self.admin.post("/v1/projects", json={"name": self.tag}), 201)
            self.producer_url, self.receiver_url = prod.url, receiver.url
            yield

    def drop_topics(self) -> None:
        assert self.admin is not None
        with s.warn_on_error("delete the benchmark's topics"):
            for topic in self.topics:
                self.admin.delete(f"/v1/projects/{self.tag}/topics/{topic}", params={"force": True})
            self.admin.delete(f"/v1/projects/{self.tag}")

    def holders(self, sub: str) -> int:
        """How many worker processes the assignment gave shards of ``sub`` to."""
        with s.zookeeper(self.endpoints.zookeeper) as zk:
            root = f"/{self.tag}/assignments"
            lists = [json.loads(zk.get(f"{root}/{w}")[0]) for w in zk.get_children(root)]
        return sum(any(k.startswith(f"{self.tag}/{sub}#") for k in keys) for keys in lists)

    def drop_metadata(self) -> None:
        s.drop_zookeeper_root(self.endpoints.zookeeper, self.tag)

    # ------------------------------------------------------------ one scenario
    def setup(self, backend: str, kind: str, *, grouped: bool, paused: bool) -> tuple[str, str]:
        """A topic and a subscription to the receiver; (subscription, storage topic)."""
        assert self.admin is not None
        name = f"{backend}-{kind}"
        body = {
            "name": name,
            "cluster": CLUSTERS[backend],
            "partitions": self.args.partitions,
            "grouped": grouped,
            "capacity": UNTHROTTLED,
        }
        topic = s.expect(self.admin.post(f"/v1/projects/{self.tag}/topics", json=body), 201)
        self.topics.append(name)
        sub = {
            "name": name,
            "topic": name,
            "endpoint": {"url": f"{self.receiver_url}/{name}"},
            "max_in_flight": self.args.in_flight,
            "paused": paused,
            "shards": self.args.shards,
        }
        if self.args.batch > 1:
            sub["batch"] = {"max_messages": self.args.batch, "max_wait_ms": 100}
        s.expect(self.admin.post(f"/v1/projects/{self.tag}/subscriptions", json=sub), 201)
        return name, topic["segments"][0]["storage_topic"]

    def produce(self, topic: str, ids: list[str], groups: int) -> dict[str, float]:
        """Batch produce ``ids`` (4 requests at a time); each id's time of the 2xx."""
        url = f"{self.producer_url}/v1/projects/{self.tag}/topics/{topic}/produce/batch"
        accepted: dict[str, float] = {}
        auth = {"Authorization": f"Bearer {self.token}"}
        chunks = [ids[i : i + BATCH] for i in range(0, len(ids), BATCH)]

        def send(chunk: list[str]) -> None:
            messages = []
            for mid in chunk:
                headers = {"X-Message-Id": mid}
                if groups:
                    headers["X-Group-Id"] = f"g{hash(mid) % groups}"
                messages.append({"payload": self.payload, "headers": headers})
            r = client.post(url, json={"messages": messages}, headers=auth)
            if r.status_code not in (200, 201):
                raise RuntimeError(f"batch produce: {r.status_code} {r.text[:300]}")
            now = time.time()
            for mid in chunk:
                accepted[mid] = now

        with httpx.Client(timeout=60) as client, ThreadPoolExecutor(4) as pool:
            list(pool.map(send, chunks))
        return accepted

    def arrivals(self, sub: str) -> dict[str, float]:
        r = httpx.get(f"{self.receiver_url}/dump/{sub}", timeout=60)
        found: dict[str, float] = r.json()
        return found

    def wait_for(self, sub: str, count: int, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        got = 0
        while time.monotonic() < deadline:
            got = int(httpx.get(f"{self.receiver_url}/count/{sub}", timeout=10).text)
            if got >= count:
                return got
            time.sleep(0.05)
        return got

    def throughput(self, backend: str, *, groups: int) -> str:
        """Produce N to a paused subscription, start it, time the drain; the storage topic."""
        assert self.admin is not None and self.worker is not None
        kind = f"grouped{groups}" if groups else "ungrouped"
        sub, storage = self.setup(backend, kind, grouped=bool(groups), paused=True)
        n = self.args.messages
        ids = [f"{kind}-{i}" for i in range(n)]
        self.produce(sub, ids, groups)
        self.worker.settle()
        load = s.load_average()
        profile = self.workdir / f"profile-{backend}-{kind}.txt"
        spy = s.py_spy(self.worker.pid, self.args.profile_s, profile) if self.args.py_spy else None
        with Cpu(self.worker.cpu_seconds) as cpu:
            t0 = time.time()
            s.expect(self.admin.post(f"/v1/projects/{self.tag}/subscriptions/{sub}/start"), 200)
            got = self.wait_for(sub, n, timeout=max(120.0, n / 200))
        if spy is not None:
            spy.wait(self.args.profile_s + 30)
        arrivals = self.arrivals(sub)
        last = max(arrivals.values(), default=t0)
        rate = len(arrivals) / max(last - t0, 1e-6)
        note = f"{n:,} msgs" + (f", only {got:,} arrived" if got < n else "")
        if self.args.shards > 1:
            note += f", shards held by {self.holders(sub)} processes"
        dups = got - len(arrivals)
        note += f", {dups} duplicates" if dups else ""
        label = f"{backend} {'grouped, ' + str(groups) + ' groups' if groups else 'ungrouped'}"
        label += f", batch {self.args.batch}" if self.args.batch > 1 else ""
        row = Row(label, rate, worker_cpu=cpu.process, host_cpu=cpu.host, note=note, load=load)
        self.add(row)
        return storage

    def latency(self, backend: str) -> None:
        """Produce at ``--rate`` for ``--warmup`` + ``--seconds`` while delivering; end-to-end
        percentiles of the messages after the warm-up (connections to the receiver and the
        partitions' readers are made during it)."""
        assert self.worker is not None
        sub, _ = self.setup(backend, "latency", grouped=False, paused=False)
        time.sleep(2.0)  # the worker takes the new subscription
        rate, seconds, per_batch = self.args.rate, self.args.seconds, 10
        interval = per_batch / rate
        warm = int(rate * self.args.warmup / per_batch)
        accepted: dict[str, float] = {}
        lock = threading.Lock()
        url = f"{self.producer_url}/v1/projects/{self.tag}/topics/{sub}/produce/batch"
        auth = {"Authorization": f"Bearer {self.token}"}

        def send(batch_no: int, client: httpx.Client) -> None:
            ids = [f"l{batch_no}-{j}" for j in range(per_batch)]
            messages = [{"payload": self.payload, "headers": {"X-Message-Id": m}} for m in ids]
            r = client.post(url, json={"messages": messages}, headers=auth)
            now = time.time()
            if r.status_code in (200, 201) and batch_no >= warm:
                with lock:
                    accepted.update(dict.fromkeys(ids, now))

        batches = warm + int(rate * seconds / per_batch)
        load = s.load_average()
        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
            start = time.monotonic()
            for b in range(batches):
                if b == warm:
                    cpu = Cpu(self.worker.cpu_seconds).__enter__()
                delay = start + b * interval - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(send, b, client)
        self.wait_for(sub, batches * per_batch, timeout=60)
        cpu.__exit__()
        arrivals = self.arrivals(sub)
        (self.workdir / f"latency-{backend}.json").write_text(
            json.dumps({m: [t, arrivals.get(m)] for m, t in accepted.items()})
        )
        lat = sorted((arrivals[m] - t) * 1000 for m, t in accepted.items() if m in arrivals)
        missing = len(accepted) - len(lat)
        note = f"{len(accepted):,} msgs at {rate:g}/s after {self.args.warmup:g}s warm-up"
        note += f", {missing} missing" if missing else ""
        row = Row(f"{backend} latency at {rate:g} msgs/s", len(lat) / seconds)
        row.p50_ms, row.p99_ms = s.percentile(lat, 50), s.percentile(lat, 99)
        row.p999_ms, row.worker_cpu, row.host_cpu = s.percentile(lat, 99.9), cpu.process, cpu.host
        row.note, row.load = note, load
        self.add(row)

    def add(self, row: Row) -> None:
        self.rows.append(row)
        lat = f", p99 {s.fmt(row.p99_ms, 1)} ms" if not math.isnan(row.p99_ms) else ""
        load = f", load average before: {s.fmt(row.load, 2)}"
        print(f"  {row.scenario}: {s.fmt(row.msgs_per_s, 0)} msgs/s{lat}  ({row.note}{load})")


# ---------------------------------------------------------------- raw consumers


def raw_kafka(bench: Bench, topic: str, count: int) -> Row:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bench.endpoints.kafka,
            "group.id": f"{bench.tag}-raw",
            "enable.auto.commit": False,
        }
    )
    parts = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(bench.args.partitions)]
    consumer.assign(parts)
    got, deadline = 0, time.monotonic() + 120
    load = s.load_average()
    with Cpu() as cpu:
        t0 = time.perf_counter()
        while got < count and time.monotonic() < deadline:
            got += sum(1 for m in consumer.consume(1000, 1.0) if m.error() is None)
        elapsed = time.perf_counter() - t0
    consumer.close()
    return Row("kafka raw confluent-kafka consumer", got / elapsed, worker_cpu=cpu.process,
               host_cpu=cpu.host, note=f"{got:,} msgs read", load=load)  # fmt: skip


def raw_pulsar(bench: Bench, topic: str, count: int) -> Row:
    import pulsar

    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    client = pulsar.Client(bench.endpoints.pulsar, operation_timeout_seconds=30, logger=quiet)
    try:
        consumer = client.subscribe(
            f"persistent://public/default/{topic}",
            f"{bench.tag}-raw",
            initial_position=pulsar.InitialPosition.Earliest,
            receiver_queue_size=5000,
        )
        got, deadline = 0, time.monotonic() + 120
        load = s.load_average()
        with Cpu() as cpu:
            t0 = time.perf_counter()
            while got < count and time.monotonic() < deadline:
                with contextlib.suppress(pulsar.Timeout):
                    msgs = consumer.batch_receive()
                    got += len(msgs)
                    consumer.acknowledge_cumulative(msgs[-1]) if len(msgs) else None
            elapsed = time.perf_counter() - t0
        consumer.close()
    finally:
        client.close()
    return Row("pulsar raw pulsar-client consumer", got / elapsed, worker_cpu=cpu.process,
               host_cpu=cpu.host, note=f"{got:,} msgs read", load=load)  # fmt: skip


# ---------------------------------------------------------------- the receiver


class _ReceiverProtocol:
    """One connection of the receiver: HTTP/1.1 keep-alive, parsed with httptools. A POST
    notes the arrival time of its ``X-Message-Id`` under the path's subscription and gets a
    204; ``GET /count/{sub}`` and ``GET /dump/{sub}`` read the figures. No ASGI layer: the
    receiver must cost the machine far less than the worker it measures."""

    def __init__(self, seen: dict[str, dict[str, float]], counts: dict[str, int]) -> None:
        import httptools

        self.seen, self.counts = seen, counts
        self.parser = httptools.HttpRequestParser(self)
        self.transport: Any = None
        self.url = b""
        self.mid = b""
        self.body = b""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except Exception:  # not HTTP: hang up
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def eof_received(self) -> None:
        return None

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"x-message-id", b"hermes-message-id"):  # Hermes: bench/peers.py
            self.mid = value

    def on_body(self, body: bytes) -> None:
        if not self.mid:  # a batch: its ids are in the JSON array
            self.body += body

    def on_message_complete(self) -> None:
        path, self.url = self.url.decode(), b""
        mid, self.mid = self.mid.decode(), b""
        body, self.body = self.body, b""
        if self.parser.get_method() == b"POST":
            sub = path.strip("/")
            now, seen = time.time(), self.seen.setdefault(sub, {})
            ids = [mid] if mid else [m["id"] for m in json.loads(body)]
            for one in ids:
                seen.setdefault(one, now)
            self.counts[sub] = self.counts.get(sub, 0) + len(ids)
            self.transport.write(b"HTTP/1.1 204 No Content\r\n\r\n")
            return
        if path.startswith("/count/"):
            body = str(self.counts.get(path[7:], 0)).encode()
        elif path.startswith("/dump/"):
            body = json.dumps(self.seen.get(path[6:], {})).encode()
        else:
            body = b'{"status": "ok"}'
        head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
        self.transport.write(head + body)


def serve_receiver(port: int) -> None:
    import asyncio

    import uvloop

    seen: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}

    async def serve() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: _ReceiverProtocol(seen, counts),  # type: ignore[arg-type,return-value]
            "127.0.0.1",
            port,
            backlog=2048,
        )
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve())


# ---------------------------------------------------------------- the run


def run(bench: Bench) -> None:
    with bench.services():
        for backend in bench.backends:
            print(
                f"{backend} ({bench.args.partitions} partitions, {bench.args.size} B payloads, "
                f"{bench.args.sender} sender)"
            )
            storage = bench.throughput(backend, groups=0)
            bench.throughput(backend, groups=bench.args.groups)
            if bench.args.throughput_only:
                continue
            bench.latency(backend)
            raw = raw_kafka if backend == "kafka" else raw_pulsar
            bench.add(raw(bench, storage, bench.args.messages))


def report(bench: Bench) -> None:
    print()
    table = [
        [
            r.scenario,
            s.fmt(r.msgs_per_s, 0),
            s.fmt(r.p50_ms, 1),
            s.fmt(r.p99_ms, 1),
            s.fmt(r.p999_ms, 1),
            s.fmt(r.worker_cpu * 100, 0) + "%",
            s.fmt(r.host_cpu * 100, 0) + "%",
            s.fmt(1e6 * r.worker_cpu / r.msgs_per_s if r.msgs_per_s > 0 else math.nan, 1),
            s.fmt(r.load, 2),
            r.note,
        ]
        for r in bench.rows
    ]
    headers = ["scenario", "msgs/s", "p50 ms", "p99 ms", "p99.9 ms", "py CPU", "host CPU"]
    headers += ["py µs/msg", "load", "notes"]
    s.print_table(headers, table)
    print(
        "\npy CPU: the worker process (the raw client for raw rows), 100% = one core; "
        "host CPU: the whole machine, 100% = every core; py µs/msg: CPU of that process per "
        "message delivered; load: the 1-minute load average just before the run.\n"
    )
    found = {r.scenario: r.msgs_per_s for r in bench.rows}
    ratios = []
    for backend in bench.backends:
        raw = next((v for k, v in found.items() if k.startswith(f"{backend} raw")), None)
        if raw is None:  # --throughput-only
            continue
        for k, v in found.items():
            if k.startswith(f"{backend} ") and "latency" not in k and "raw" not in k:
                ratios.append([f"{k} / raw consumer", f"{v / raw:.1%}"])
    s.print_table(["ratio of msgs/s", "ours"], ratios)
    print(f"\nlogs, configs{' and profiles' * bench.args.py_spy}: {bench.workdir}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--backend", choices=["kafka", "pulsar", "both"], default="both")
    p.add_argument("--messages", type=int, default=20_000, help="per throughput run")
    p.add_argument("--groups", type=int, default=1_000)
    p.add_argument("--rate", type=float, default=1_000.0, help="msgs/s of the latency run")
    p.add_argument("--seconds", type=float, default=10.0, help="length of the latency run")
    p.add_argument("--warmup", type=float, default=3.0, help="unmeasured start of it")
    p.add_argument("--size", type=int, default=256, help="payload bytes")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--in-flight", type=int, default=200, help="the subscription's max in-flight")
    p.add_argument("--batch", type=int, default=1, help="deliver in batches of up to N (1: off)")
    p.add_argument("--throughput-only", action="store_true", help="skip latency and raw runs")
    p.add_argument("--processes", default="1", help="the worker's processes (N or auto)")
    p.add_argument(
        "--shards", type=int, default=1, help="of each subscription (one worker process holds one)"
    )
    p.add_argument(
        "--sender",
        choices=["fast"],  # the aiohttp and httpx senders: bench/senders.py
        default="fast",
        help="the worker's HTTP sender (its setting 'sender')",
    )
    p.add_argument("--py-spy", action="store_true", help="profile the worker's drains")
    p.add_argument("--profile-s", type=float, default=5.0)
    s.add_run_args(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["receiver"]:
        serve_receiver(int(argv[argv.index("--port") + 1]))
        return 0
    args = parse_args(argv)
    return s.run_and_report(
        Bench(args, *s.bench_setup(args, "httpbus-bench-deliver-")), run, report
    )


if __name__ == "__main__":
    sys.exit(main())

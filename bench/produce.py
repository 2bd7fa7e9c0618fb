"""The producer benchmark: our produce path beside the baselines it is measured against.

In one run, against the real ZooKeeper, Kafka and Pulsar on 127.0.0.1, it starts the control
plane and the producer service as processes of their own, creates a project and a topic per
backend through the admin API, and loads the producer with wrk (another process):

- the *bare handler* (Starlette on uvicorn, reads the body, answers 201): the ceiling of
  Python HTTP on this machine; and the same on FastAPI, the framework's own share;
- single-message and batch produce on each backend, as fast as the service answers;
- single-message produce at a fixed, moderate rate: half the bare handler's ceiling (and half
  our own maximum too, when the first is more than the service can take);
- the raw clients (confluent-kafka acks=all + idempotence; pulsar-client send_async with
  batching) writing as many messages straight to a storage topic as our batch run stored;
- idempotent publish: single-message produce with a new ``X-Message-Id`` per request, on a
  topic without and with ``dedupe_window`` (``--dedupe-window``), at full speed and at a fixed
  rate both can take (half the slower one's full speed), with the ratios and the load average
  (``--dedupe-only`` runs just these). The ids live in a database of the bench's own on the
  real PostgreSQL (``--dedupe-store postgres``, migrated, dropped at the end) or in the
  embedded SQLite store (``--dedupe-store embedded``).

It prints msgs/s, latency percentiles and CPU use per scenario and the ratios to the
baselines; it never asserts timings. Every run ends by itself; everything it starts is stopped
and everything it creates is deleted at the end, also on Ctrl-C. Usage::

    .venv/bin/python bench/produce.py --backend both --seconds 10 --connections 64 --size 1024
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import platform
import random
import string
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _support as s
import httpx
import yaml
from _support import CLUSTERS, Cpu, Endpoints, LoadResult, LoadSpec, Server

BENCH_DIR = Path(__file__).resolve().parent
# The benchmark measures the produce path, not the topic's quota (429 past 5,000 msg/s).
UNTHROTTLED = {"max_qps": 1_000_000, "max_bytes_per_second": 1024**3}


@dataclass
class Row:
    """One line of the table; ``result`` is None for the raw-client baselines."""

    scenario: str
    msgs_per_s: float
    result: LoadResult | None = None
    note: str = ""
    cpu: float = math.nan  # the Python process that produces (server or raw client); 1 = a core
    host_cpu: float = math.nan  # the whole machine; 1 = every core
    load: float = math.nan  # the 1-minute load average just before the run


class Bench(s.BenchRun):
    """One benchmark run: its names, its processes, its figures."""

    def __init__(self, args: argparse.Namespace, endpoints: Endpoints, workdir: Path) -> None:
        super().__init__(args, endpoints, workdir)
        alphabet = string.ascii_letters + string.digits
        self.payload = "".join(random.Random(1).choices(alphabet, k=args.size))
        self.batch_body = json.dumps({"messages": [{"payload": self.payload}] * args.batch})
        self.rows: list[Row] = []
        self.dedupe_rows: list[DedupeRow] = []
        self.wrk = None if args.load == "httpx" else s.ensure_wrk()
        if self.wrk is None:
            print("NOTE: wrk is unusable: the (much slower) httpx load generator is used.")
        self.kafka_topics = [f"{self.tag}.audit"]
        self.pulsar_topics: list[str] = []

    # ------------------------------------------------------------ services

    def configs(self) -> tuple[Path, Path]:
        """The control plane's and the producer's settings files (one schema each)."""
        e = self.endpoints
        common: dict[str, Any] = {
            "admin_token": self.token,
            "metastore": {"kind": "zookeeper", "hosts": e.zookeeper, "root": f"/{self.tag}"},
            "clusters": {
                "kafka-main": {
                    "backend": "kafka",
                    "bootstrap_servers": e.kafka,
                    "linger_ms": self.args.linger_ms,
                },
                "pulsar-main": {
                    "backend": "pulsar",
                    "service_url": e.pulsar,
                    "admin_url": e.pulsar_admin,
                },
            },
        }
        control = {**common, "default_cluster": "kafka-main", "storage_topic_prefix": self.tag}
        producer = {
            **common,
            "audit": {"cluster": "kafka-main", "topic": f"{self.tag}.audit"},
            "dedupe": self.dedupe_store(),
        }
        paths = self.workdir / "control-plane.yaml", self.workdir / "producer.yaml"
        for path, settings in zip(paths, (control, producer), strict=True):
            path.write_text(yaml.safe_dump(settings))
        return paths

    def dedupe_store(self) -> dict[str, Any]:
        """The producer's dedupe store: a database of our own on the real PostgreSQL,
        migrated (dropped by :meth:`drop_storage`), or an embedded file in the workdir."""
        if self.args.dedupe_store == "embedded":
            return {"kind": "embedded", "path": str(self.workdir / "dedupe.db")}
        import psycopg

        from reports import migrate

        if not self.endpoints.postgres:
            raise SystemExit("the services file names no PostgreSQL: --dedupe-store embedded")
        with psycopg.connect(self.endpoints.postgres, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"')
        url = self.endpoints.postgres.rsplit("/", 1)[0] + f"/{self.database}"
        migrate.upgrade(url)
        return {"kind": "postgres", "url": url}

    @property
    def database(self) -> str:
        return self.tag.replace("-", "_")

    def server(self, name: str, *argv: str | Path) -> Server:
        """``python *argv --port P`` (not started), logging to the work dir."""
        port = s.free_port()
        command = [sys.executable, *map(str, argv), "--port", str(port)]
        return Server(name, command, port, self.workdir / f"{name}.log")

    @contextlib.contextmanager
    def services(self) -> Iterator[Server]:
        """The control plane and the producer service, our topics made; on the way out the
        topics are deleted, the services stopped, then what is left in storage deleted."""
        control_yaml, producer_yaml = self.configs()
        with contextlib.ExitStack() as stack:
            stack.callback(self.drop_storage)
            control = stack.enter_context(
                self.server("control-plane", "-m", "control_plane", "--config", control_yaml)
            )
            producer = stack.enter_context(
                self.server(
                    "producer",
                    *("-m", "producer_api", "--config", producer_yaml),
                    *("--processes", str(self.args.processes)),
                )
            )
            admin = stack.enter_context(
                httpx.Client(
                    base_url=control.url,
                    headers={"Authorization": f"Bearer {self.token}"},
                    timeout=60,
                )
            )
            stack.callback(self.drop_catalog, admin)
            s.expect(admin.post("/v1/projects", json={"name": self.tag}), 201)
            for backend in self.backends:
                topic = {"name": backend, "cluster": CLUSTERS[backend], "capacity": UNTHROTTLED}
                topic["partitions"] = self.args.partitions
                s.expect(admin.post(f"/v1/projects/{self.tag}/topics", json=topic), 201)
                deduped = {**topic, "name": f"{backend}-dedupe"}
                deduped["dedupe_window"] = self.args.dedupe_window
                s.expect(admin.post(f"/v1/projects/{self.tag}/topics", json=deduped), 201)
            yield producer

    def drop_catalog(self, admin: httpx.Client) -> None:
        """Delete our topics (the control plane deletes their storage topics) and project."""
        with s.warn_on_error("delete the benchmark's topics"):
            for backend in self.backends:
                for name in (backend, f"{backend}-dedupe"):
                    admin.delete(f"/v1/projects/{self.tag}/topics/{name}", params={"force": True})
            admin.delete(f"/v1/projects/{self.tag}")

    def drop_storage(self) -> None:
        """Delete our ZooKeeper root, the audit and raw Kafka topics, the raw Pulsar topics."""
        from confluent_kafka.admin import AdminClient

        s.drop_zookeeper_root(self.endpoints.zookeeper, self.tag)
        if self.args.dedupe_store == "postgres" and self.endpoints.postgres:
            import psycopg

            with (
                s.warn_on_error("drop the dedupe database"),
                psycopg.connect(self.endpoints.postgres, autocommit=True) as conn,
            ):
                conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        with s.warn_on_error("delete the Kafka topics"):
            admin = AdminClient({"bootstrap.servers": self.endpoints.kafka})
            for future in admin.delete_topics(self.kafka_topics, operation_timeout=30).values():
                with contextlib.suppress(Exception):  # one never created: nothing to delete
                    future.result(timeout=30)
        for topic in self.pulsar_topics:
            with s.warn_on_error(f"delete Pulsar topic {topic}"):
                url = _pulsar_partitions_url(self.endpoints, topic)
                httpx.delete(url, params={"force": True}, timeout=30)

    # ------------------------------------------------------------ load

    def spec(
        self,
        url: str,
        *,
        batch: bool = False,
        rate: float | None = None,
        unique_ids: str | None = None,
    ) -> LoadSpec:
        content_type = "application/json" if batch else "application/octet-stream"
        return LoadSpec(
            url=url,
            body=(self.batch_body if batch else self.payload).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": content_type},
            connections=self.args.connections,
            threads=self.args.threads,
            seconds=self.args.seconds,
            rate=rate,
            unique_ids=unique_ids,
        )

    def load(self, name: str, server: Server, spec: LoadSpec, per_request: int = 1) -> Row:
        """Once the server is idle, a warm-up, then the measured run (profiled with --py-spy);
        a row of the table."""
        if (waited := server.settle()) > 1:
            print(f"  ({server.name} was busy for {waited:.1f}s after the previous run)")
        if self.args.warmup > 0:
            # Ids of its own: the measured run's ids (wrk counts from 1 again) would otherwise
            # repeat the warm-up's, and be answered as duplicates.
            ids = f"{spec.unique_ids}-warm-up" if spec.unique_ids else None
            warmup = dataclasses.replace(spec, seconds=self.args.warmup, unique_ids=ids)
            self._generate(f"{name} warm-up", warmup)
        profile = self.workdir / f"profile-{s.slug(name)}.txt"
        load = s.load_average()
        spy = s.py_spy(server.pid, spec.seconds, profile) if self.args.py_spy else None
        try:
            with Cpu(server.cpu_seconds) as cpu:
                result = self._generate(name, spec)
        finally:
            if spy is not None:
                spy.wait(spec.seconds + 30)
        msgs_per_s = result.ok * per_request / result.seconds
        return self.add(
            Row(name, msgs_per_s, result, result.describe_errors(), cpu.process, cpu.host, load)
        )

    def add(self, row: Row) -> Row:
        self.rows.append(row)
        p99 = f", p99 {s.fmt(row.result.p99_ms, 2)} ms" if row.result else ""
        load = f" (load average before: {s.fmt(row.load, 2)})"
        print(f"  {row.scenario}: {s.fmt(row.msgs_per_s, 0)} msgs/s{p99} {row.note}{load}")
        return row

    def _generate(self, name: str, spec: LoadSpec) -> LoadResult:
        if self.wrk is not None:
            try:
                result = s.run_wrk(self.wrk, spec, self.workdir)
            except RuntimeError as exc:
                print(f"NOTE: wrk failed, the httpx load generator takes over: {exc}")
                self.wrk = None
            else:
                (self.workdir / f"wrk-{s.slug(name)}.txt").write_text(result.raw)
                return result
        return s.run_httpx(spec)


def _pulsar_partitions_url(endpoints: Endpoints, topic: str) -> str:
    return f"{endpoints.pulsar_admin}/admin/v2/persistent/public/default/{topic}/partitions"


# ---------------------------------------------------------------- raw client baselines


def raw_kafka(bench: Bench, count: int) -> Row:
    """confluent-kafka straight to a topic: acks=all, idempotent, our linger.ms."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic = f"{bench.tag}.raw"
    bench.kafka_topics.append(topic)
    admin = AdminClient({"bootstrap.servers": bench.endpoints.kafka})
    admin.create_topics([NewTopic(topic, bench.args.partitions, 1)])[topic].result(timeout=30)
    config = {"acks": "all", "enable.idempotence": True, "linger.ms": bench.args.linger_ms}
    producer = Producer({"bootstrap.servers": bench.endpoints.kafka, **config})
    value, outcomes = bench.payload.encode(), Counter[str]()

    def delivered(err: Any, msg: Any) -> None:
        outcomes["failed" if err is not None else "acked"] += 1

    def send() -> bool:
        try:
            producer.produce(topic, value, on_delivery=delivered)
        except BufferError:  # the local queue is full: let librdkafka drain it
            producer.poll(0.01)
            return False
        producer.poll(0)
        return True

    producer.produce(topic, value)  # warm: metadata and producer id before the clock starts
    producer.flush(30)
    name = "raw confluent-kafka (acks=all, idempotent)"
    return _timed(bench, name, count, send, lambda left, _: producer.flush(left), outcomes)


def raw_pulsar(bench: Bench, count: int) -> Row:
    """pulsar-client straight to a partitioned topic: send_async with batching."""
    import pulsar

    name = f"{bench.tag}-raw"
    bench.pulsar_topics.append(name)
    url = _pulsar_partitions_url(bench.endpoints, name)
    httpx.put(url, json=bench.args.partitions, timeout=30).raise_for_status()
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    client = pulsar.Client(bench.endpoints.pulsar, operation_timeout_seconds=30, logger=quiet)
    value, outcomes = bench.payload.encode(), Counter[str]()

    def delivered(result: Any, msg_id: Any) -> None:
        outcomes["acked" if result == pulsar.Result.Ok else "failed"] += 1

    def send() -> bool:
        producer.send_async(value, delivered)  # blocks while the client's queue is full
        return True

    def finish(left: float, sent: int) -> None:
        producer.flush()
        deadline = time.monotonic() + left
        while outcomes.total() < sent and time.monotonic() < deadline:
            time.sleep(0.001)

    try:
        producer = client.create_producer(
            f"persistent://public/default/{name}",
            batching_enabled=True,
            batching_max_messages=1000,
            batching_max_publish_delay_ms=1,
            block_if_queue_full=True,
            send_timeout_millis=30_000,
        )
        producer.send(value)  # warm: every partition's producer is connected by now
        row = _timed(
            bench, "raw pulsar-client (send_async, batching)", count, send, finish, outcomes
        )
        producer.close()
        return row
    finally:
        client.close()


def _timed(
    bench: Bench,
    name: str,
    count: int,
    send: Callable[[], bool],
    finish: Callable[[float, int], object],
    outcomes: Counter[str],
) -> Row:
    """``send`` ``count`` messages, ``finish`` (await their acks), within a time budget."""
    deadline = time.monotonic() + 3 * bench.args.seconds + 30
    sent = 0
    load = s.load_average()
    with Cpu() as cpu:
        t0 = time.perf_counter()
        while sent < count and time.monotonic() < deadline:
            sent += send()
        finish(max(1.0, deadline - time.monotonic()), sent)
        elapsed = time.perf_counter() - t0
    missing = sent - outcomes.total()
    notes = [f"{sent:,} msgs"]
    notes += [f"{outcomes['failed']} failed"] if outcomes["failed"] else []
    notes += [f"{missing} unacknowledged"] if missing else []
    msgs_per_s = outcomes["acked"] / elapsed
    return bench.add(Row(name, msgs_per_s, None, ", ".join(notes), cpu.process, cpu.host, load))


# ---------------------------------------------------------------- the run


def run(bench: Bench) -> None:
    """Every scenario, in an order that lets later ones use earlier figures."""
    args = bench.args
    bare_rows = {}
    frameworks = ("starlette",) if args.quick else ("starlette", "fastapi")
    for framework in () if args.dedupe_only else frameworks:
        if not bare_rows:
            print("bare handlers (uvicorn + uvloop + httptools)")
        argv = (BENCH_DIR / "_support.py", "bare", "--framework", framework)
        with bench.server(f"bare-{framework}", *argv) as bare:
            name = f"bare {framework} handler"
            bare_rows[framework] = bench.load(name, bare, bench.spec(f"{bare.url}/p"))
    if args.dedupe_only:
        with bench.services() as producer:
            for backend in bench.backends:
                dedupe(bench, producer, backend)
        return
    ceiling = bare_rows["starlette"].msgs_per_s
    with bench.services() as producer:
        for backend in bench.backends:
            if not args.quick:
                dedupe(bench, producer, backend)
            url = f"{producer.url}/v1/projects/{bench.tag}/topics/{backend}/produce"
            print(f"{backend} (topic of {args.partitions} partitions)")
            single = bench.load(f"{backend} single", producer, bench.spec(url))
            batch_spec = bench.spec(f"{url}/batch", batch=True)
            batch = bench.load(f"{backend} batch x{args.batch}", producer, batch_spec, args.batch)
            if args.quick:
                continue
            moderate(bench, producer, backend, url, ceiling / 2, single.msgs_per_s)
            count = max(10_000, round(batch.msgs_per_s * args.seconds))
            (raw_kafka if backend == "kafka" else raw_pulsar)(bench, count)
        if any(row.result is not None and row.result.describe_errors() for row in bench.rows):
            print(f"\nproducer service log (tail of {producer.log}):\n{producer.tail(30)}")


@dataclass
class DedupeRow:
    row: Row
    loadavg: tuple[float, float, float]


def dedupe(bench: Bench, producer: Server, backend: str) -> None:
    """Single-message produce, a new X-Message-Id each, dedupe off then on: at full speed,
    then at half the slower one's full speed (latency at a load both can take)."""
    base = f"{producer.url}/v1/projects/{bench.tag}/topics"
    print(f"{backend}: idempotent publish (dedupe_window {bench.args.dedupe_window}) off / on")
    full: dict[str, float] = {}
    for rate_label in ("max", "fixed"):
        for mode, topic in (("off", backend), ("on", f"{backend}-dedupe")):
            rate = None if rate_label == "max" else max(1.0, min(full.values()) / 2)
            label = "max" if rate is None else f"@ {s.fmt(rate, 0)}/s"
            name = f"{backend} single, unique ids, dedupe {mode} {label}"
            ids = f"{bench.tag}-{mode}-{rate_label}"
            row = bench.load(
                name, producer, bench.spec(f"{base}/{topic}/produce", rate=rate, unique_ids=ids)
            )
            bench.dedupe_rows.append(DedupeRow(row, os.getloadavg()))
            if rate is None:
                full[mode] = row.msgs_per_s


def dedupe_report(bench: Bench) -> None:
    if not bench.dedupe_rows:
        return
    a = bench.args
    print(f"\n== idempotent publish: dedupe_window {a.dedupe_window} off vs on ({a.dedupe_store})")
    table = []
    for d in bench.dedupe_rows:
        r, row = d.row.result, d.row
        ratio = ""
        if " dedupe on " in row.scenario:  # each "on" run follows its "off" run
            off = bench.dedupe_rows[bench.dedupe_rows.index(d) - 1].row
            if r is not None and off.result is not None and off.msgs_per_s:
                ratio = (
                    f"{row.msgs_per_s / off.msgs_per_s:.1%} msgs/s, p50 "
                    f"x{r.p50_ms / off.result.p50_ms:.2f}, p99 x{r.p99_ms / off.result.p99_ms:.2f}"
                )
        load = " ".join(f"{x:.2f}" for x in d.loadavg)
        latencies = [s.fmt(x, 2) for x in (r.p50_ms, r.p99_ms)] if r else ["-"] * 2
        table.append(
            [
                row.scenario,
                s.fmt(row.msgs_per_s, 0),
                *latencies,
                s.fmt(_cpu_us(row), 1),
                ratio,
                load,
                row.note,
            ]
        )
    headers = ["scenario", "msgs/s", "p50 ms", "p99 ms", "py µs/msg", "on / off", "load avg"]
    s.print_table([*headers, "errors / notes"], table)


def moderate(
    bench: Bench, producer: Server, backend: str, url: str, rate: float, our_max: float
) -> None:
    """Single-message latency at a fixed rate; also at half our own maximum when ``rate``
    is close to or beyond what the service can take (then it measures an overload)."""
    targets = [("half bare ceiling", rate)]
    if rate > 0.8 * our_max:
        targets.append(("half our max", our_max / 2))
    for label, target in targets:
        name = f"{backend} single @ {s.fmt(target, 0)}/s ({label})"
        row = bench.load(name, producer, bench.spec(url, rate=max(1.0, target)))
        row.note = ", ".join(x for x in (f"target {s.fmt(target, 0)}/s", row.note) if x)


def report(bench: Bench) -> None:
    """The table and the ratios to the baselines."""
    a = bench.args
    if a.dedupe_only:
        dedupe_report(bench)
        print(f"\nlogs, configs, wrk outputs: {bench.workdir}")
        return
    load = bench.wrk or "httpx, the fallback (slow: it is the bottleneck when py CPU is low)"
    print(
        f"\n== produce: {a.seconds:g}s per run, {a.connections} connections, {a.threads} load "
        f"threads, {a.size} B messages, batches of {a.batch}, {a.partitions} partitions; "
        f"load: {load}; {os.cpu_count()} CPUs; Python {platform.python_version()}\n"
    )
    table = []
    for row in bench.rows:
        r = row.result
        latencies = [s.fmt(x, 2) for x in (r.p50_ms, r.p99_ms, r.p999_ms)] if r else ["-"] * 3
        cpu = [f"{s.fmt(100 * x, 0)}%" for x in (row.cpu, row.host_cpu)]
        per = s.fmt(_cpu_us(row), 1)
        figures = [s.fmt(row.msgs_per_s, 0), *latencies, *cpu, per, s.fmt(row.load, 2)]
        table.append([row.scenario, *figures, row.note])
    headers = ["scenario", "msgs/s", "p50 ms", "p99 ms", "p99.9 ms", "py CPU", "host CPU"]
    headers += ["py µs/msg", "load"]
    s.print_table([*headers, "errors / notes"], table)
    print(
        "\npy CPU: the Python process that produces (the server, or the raw client), 100% = "
        "one core; host CPU: the whole machine (wrk and the brokers too), 100% = every core; "
        "py µs/msg: CPU of that process per message, the figure least moved by other load on "
        "a shared machine; load: the 1-minute load average just before the run.\n"
    )
    found = {row.scenario.split(" (")[0]: row.msgs_per_s for row in bench.rows}
    per_msg = {row.scenario.split(" (")[0]: _cpu_us(row) for row in bench.rows}
    ratios = []
    for backend in bench.backends:
        raw = "raw confluent-kafka" if backend == "kafka" else "raw pulsar-client"
        for ours, baseline in (("single", "bare starlette handler"), (f"batch x{a.batch}", raw)):
            if baseline not in found:  # --quick runs no raw client
                continue
            ratio = found[f"{backend} {ours}"] / found[baseline]
            cpu = per_msg[baseline] / per_msg[f"{backend} {ours}"]
            ratios.append([f"{backend} {ours} / {baseline}", f"{ratio:.1%}", f"{cpu:.1%}"])
    s.print_table(["ratio", "of msgs/s", "of CPU per msg (inverse)"], ratios)
    dedupe_report(bench)
    print(f"\nlogs, configs, wrk outputs{' and profiles' * a.py_spy}: {bench.workdir}")


def _cpu_us(row: Row) -> float:
    """Microseconds of the producing process's CPU per message (NaN if not measured)."""
    return 1e6 * row.cpu / row.msgs_per_s if row.msgs_per_s > 0 else math.nan


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--backend", choices=["kafka", "pulsar", "both"], default="both")
    p.add_argument("--seconds", type=float, default=10.0, help="length of each measured run")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured run before each")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--threads", type=int, default=2, help="load generator threads")
    p.add_argument("--size", type=int, default=1024, help="message size in bytes")
    p.add_argument("--batch", type=int, default=100, help="messages per batch request")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--processes", default="1", help="the producer's processes (N or auto)")
    p.add_argument("--load", choices=["wrk", "httpx"], default="wrk", help="load generator")
    p.add_argument("--linger-ms", type=int, default=5, help="the Kafka cluster's linger_ms")
    p.add_argument("--py-spy", action="store_true", help="profile every run (py-spy)")
    p.add_argument("--dedupe-window", default="10m", help="of the dedupe topics")
    p.add_argument("--dedupe-only", action="store_true", help="run only the dedupe off/on runs")
    p.add_argument(
        "--quick",
        action="store_true",
        help="run only the bare Starlette handler, single and batch publish",
    )
    p.add_argument(
        "--dedupe-store",
        choices=["postgres", "embedded"],
        default="postgres",
        help="where the producer keeps the ids (PostgreSQL of the services file, or SQLite)",
    )
    s.add_run_args(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return s.run_and_report(Bench(args, *s.bench_setup(args, "httpbus-bench-")), run, report)


if __name__ == "__main__":
    sys.exit(main())

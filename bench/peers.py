"""httpbus beside peers nobody on this team wrote, under the same load, in one sitting.

Single-message publish with ``bench/produce.py``'s wrk load (64 connections, 1 KiB bodies, a
4-partition topic, a warm-up before each run), and every figure printed beside httpbus's:

- **Pulsar**: httpbus's ``POST .../produce`` on a Pulsar topic, against Pulsar's own REST
  produce (PIP-64, ``POST /topics/persistent/public/default/<topic>``, one message per
  request) on the same standalone broker;
- **Kafka** (``--hermes``): httpbus on a Kafka topic, against Allegro Hermes 0.11's frontend,
  both on one Kafka 3.9 broker in ZooKeeper mode that this script starts (Hermes 0.11 speaks
  the Kafka 0.10 protocol); Hermes is fetched and started by ``scripts/realservices``
  (``scripts.realservices.hermes``), see its module doc for what it needs on Java 17.

httpbus runs twice per backend: with everything on (bearer token checked, an audit event per
message) and with the audit trail off (the token is still checked: the admin token, the
cheapest path), since the peers check nothing and write no audit trail.

Per run it prints msgs/s, p50/p99 latency, the load average just before, and the
CPU-seconds per 1,000 messages of every process taking part (from ``/proc``: the service, the
broker(s), wrk), then the ratio of each httpbus figure to the peer's. The shared brokers also
serve other people: their CPU is what they used during the run, whoever asked. It never
asserts timings; everything it starts is stopped and everything it creates deleted, also on
Ctrl-C. Usage::

    .venv/bin/python bench/peers.py --seconds 5            # the Pulsar REST peer
    .venv/bin/python bench/peers.py --seconds 5 --hermes   # and Hermes (make bench-peers)
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import math
import os
import random
import resource
import secrets
import string
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _support as s
import broker_requests
import httpx
import log_batches
import produce
from _support import Endpoints, LoadResult, LoadSpec

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    """One measured run: the figures and the CPU-seconds of each process during it."""

    scenario: str
    result: LoadResult
    load: float
    cpu_s: dict[str, float] = field(default_factory=dict)
    per_request: int = 1  # messages a request carries (a batch publish)

    @property
    def messages(self) -> int:
        return self.result.ok * self.per_request

    @property
    def msgs_per_s(self) -> float:
        return self.messages / self.result.seconds if self.result.seconds else math.nan

    def per_1000(self, process: str) -> float:
        """CPU-seconds of ``process`` per 1,000 accepted messages."""
        ok = self.messages
        return 1000 * self.cpu_s.get(process, math.nan) / ok if ok else math.nan

    @property
    def total_per_1000(self) -> float:
        ok = self.messages
        return 1000 * sum(self.cpu_s.values()) / ok if ok else math.nan


def children_cpu_s() -> float:
    """CPU-seconds of this script's finished children (wrk, once waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


class Peers:
    """The sitting: the shared servers, a work folder, the runs so far."""

    def __init__(self, args: argparse.Namespace, endpoints: Endpoints, workdir: Path) -> None:
        self.args = args
        self.endpoints = endpoints
        self.workdir = workdir
        self.runs: list[Run] = []
        self.batch_lines: list[str] = []  # batch publish beside the raw client (Kafka)
        self.requests: broker_requests.RequestLog | None = None  # --requests, on Hermes's broker
        self.wrk = s.ensure_wrk()
        if self.wrk is None:
            raise SystemExit("bench/peers.py needs wrk (apt-get install -y wrk)")
        state = json.loads(args.services_file.read_text())
        # The body bench/produce.py sends (random letters and digits): a run of one letter
        # would compress to nothing wherever a peer compresses, and flatter it.
        alphabet = string.ascii_letters + string.digits
        self.payload = "".join(random.Random(1).choices(alphabet, k=args.size))
        self.shared_pids = {
            name: int(info["pid"]) for name, info in state.get("processes", {}).items()
        }

    def measure(
        self,
        scenario: str,
        spec: LoadSpec,
        pids: dict[str, int],
        warmup: float | None = None,
        per_request: int = 1,
    ) -> Run:
        """A warm-up, then the measured wrk run; CPU of every process in ``pids`` and wrk."""
        warmup = self.args.warmup if warmup is None else warmup
        if warmup > 0:
            s.run_wrk(self.wrk, dataclasses.replace(spec, seconds=warmup), self.workdir)
        load = s.load_average()
        before = {name: s.session_cpu_s(pid) for name, pid in pids.items()}
        wrk_before = children_cpu_s()
        if self.requests is not None:
            self.requests.mark()
        result = s.run_wrk(self.wrk, spec, self.workdir)
        cpu = {name: s.session_cpu_s(pid) - before[name] for name, pid in pids.items()}
        cpu["wrk"] = children_cpu_s() - wrk_before
        (self.workdir / f"wrk-{s.slug(scenario)}.txt").write_text(result.raw)
        run = Run(scenario, result, load, cpu, per_request)
        self.runs.append(run)
        errors = result.describe_errors()
        print(
            f"  {scenario}: {s.fmt(run.msgs_per_s, 0)} msgs/s, p50 {s.fmt(result.p50_ms, 2)} ms,"
            f" p99 {s.fmt(result.p99_ms, 2)} ms, {s.fmt(run.total_per_1000, 3)} CPU-s per 1,000"
            f" msgs in all (load average before: {s.fmt(load, 2)}){' ' + errors if errors else ''}"
        )
        if self.requests is not None:
            for line in self.requests.since_mark().lines(result.ok):
                print(f"    broker requests of {line}")
        return run

    # ------------------------------------------------------------ httpbus

    def httpbus_runs(
        self,
        backend: str,
        kafka: str,
        broker_pids: dict[str, int],
        audit_pid: int,
        first_warmup: float | None = None,
        log_dirs: Path | None = None,
    ) -> list[Run]:
        """Single publish through our producer service on ``backend``, with and without the
        audit trail (``kafka``: the bootstrap of the Kafka cluster it uses, also for the
        audit topic; ``audit_pid``: that broker, billed when the audit trail is on;
        ``log_dirs``: that broker's, to print the batches each run wrote)."""
        runs = []
        lingers = self.args.linger_ms
        for linger_ms, audit in ((linger, audit) for linger in lingers for audit in (True, False)):
            args = argparse.Namespace(
                **{
                    **vars(produce.parse_args([])),
                    "backend": backend,
                    "seconds": self.args.seconds,
                    "warmup": self.args.warmup,
                    "connections": self.args.connections,
                    "size": self.args.size,
                    "partitions": self.args.partitions,
                    "services_file": self.args.services_file,
                    "processes": str(self.args.producer_processes),
                    "linger_ms": linger_ms,
                }
            )
            endpoints = dataclasses.replace(self.endpoints, kafka=kafka)
            run_dir = self.workdir / f"httpbus-{backend}-{audit}-{linger_ms}"
            bench = produce.Bench(args, endpoints, run_dir)
            bench.workdir.mkdir(parents=True, exist_ok=True)
            with _audit(bench, audit), bench.services() as producer:
                url = f"{producer.url}/v1/projects/{bench.tag}/topics/{backend}/produce"
                producer.settle()
                label = "everything on" if audit else "audit off, token checked"
                label += f", linger.ms {linger_ms}" if len(lingers) > 1 else ""
                ours = f"httpbus producer x{self.args.producer_processes}"
                pids = {ours: producer.pid, **broker_pids}
                if audit:
                    pids.setdefault("kafka broker (audit)", audit_pid)
                    if audit_pid in broker_pids.values():
                        del pids["kafka broker (audit)"]
                warmup = first_warmup if not runs else None
                spec = bench.spec(url)
                runs.append(self.measure(f"httpbus {backend} ({label})", spec, pids, warmup))
                if log_dirs is not None:
                    print_batches(log_dirs, bench.tag)
                if audit and linger_ms == lingers[0] and self.args.batch and backend == "kafka":
                    self.batch_beside_raw(bench, url, pids, label)
        return runs

    def batch_beside_raw(
        self, bench: produce.Bench, url: str, pids: dict[str, int], label: str
    ) -> None:
        """Batch publish (``--batch`` messages a request) through our producer, then the raw
        client writing as many messages straight to a topic of the same broker."""
        size = self.args.batch
        bench.batch_body = json.dumps({"messages": [{"payload": self.payload}] * size})
        spec = bench.spec(f"{url}/batch", batch=True)
        name = f"httpbus kafka batch x{size} ({label})"
        batch = self.measure(name, spec, pids, per_request=size)
        count = max(10_000, round(batch.msgs_per_s * self.args.seconds))
        raw = produce.raw_kafka(bench, count)
        ours = batch.per_1000(next(iter(pids))) * 1000  # µs of producer CPU per message
        theirs = 1e6 * raw.cpu / raw.msgs_per_s if raw.msgs_per_s else math.nan
        self.batch_lines.append(
            f"{name}: {s.fmt(batch.msgs_per_s, 0)} msgs/s at {s.fmt(ours, 1)} µs of producer "
            f"CPU a message; raw confluent-kafka {s.fmt(raw.msgs_per_s, 0)} msgs/s at "
            f"{s.fmt(theirs, 1)} µs: {batch.msgs_per_s / raw.msgs_per_s:.1%} of its msgs/s, "
            f"{ours / theirs:.2f}x its CPU a message"
        )

    # ------------------------------------------------------------ Pulsar REST

    def pulsar_rest(self, warmup: float | None = None) -> Run:
        """Pulsar's REST produce: one message per request, the same 1 KiB payload."""
        topic = f"bench-{secrets.token_hex(4)}-rest"
        admin = f"{self.endpoints.pulsar_admin}/admin/v2/persistent/public/default/{topic}"
        httpx.put(f"{admin}/partitions", json=self.args.partitions, timeout=30).raise_for_status()
        try:
            payload = self.payload
            spec = LoadSpec(
                url=f"{self.endpoints.pulsar_admin}/topics/persistent/public/default/{topic}",
                body=json.dumps({"messages": [{"payload": payload}]}).encode(),
                headers={"Content-Type": "application/json"},
                connections=self.args.connections,
                threads=2,
                seconds=self.args.seconds,
            )
            pids = {"pulsar broker": self.shared_pids["pulsar"]}
            return self.measure("Pulsar REST produce (PIP-64)", spec, pids, warmup)
        finally:
            with s.warn_on_error(f"delete Pulsar topic {topic}"):
                httpx.delete(f"{admin}/partitions", params={"force": True}, timeout=30)


@contextlib.contextmanager
def _audit(bench: produce.Bench, on: bool) -> Iterator[None]:
    """Turn the producer's audit trail off for one ``services()`` if ``on`` is False."""
    if on:
        yield
        return
    original: Callable[[], tuple[Path, Path]] = bench.configs

    def without_audit() -> tuple[Path, Path]:
        control, producer_yaml = original()
        import yaml

        settings: dict[str, Any] = yaml.safe_load(producer_yaml.read_text())
        settings.pop("audit", None)
        producer_yaml.write_text(yaml.safe_dump(settings))
        return control, producer_yaml

    bench.configs = without_audit  # type: ignore[method-assign]
    yield


# ---------------------------------------------------------------- the sitting


def run_pulsar(peers: Peers) -> None:
    print(f"Pulsar ({peers.args.partitions} partitions, {peers.args.size} B messages)")
    broker = {"pulsar broker": peers.shared_pids["pulsar"]}
    kafka = peers.shared_pids["kafka"]
    # The shared broker may be fresh too (a new services-up): its JIT warms on each side's
    # first run (an idle sitting measured REST at 2,687 msgs/s cold, 9,311 warm).
    jit = peers.args.jvm_warmup
    ours = peers.httpbus_runs("pulsar", peers.endpoints.kafka, broker, kafka, jit)
    rest = peers.pulsar_rest(jit)
    compare(ours, rest)


def run_hermes(peers: Peers) -> None:
    sys.path.insert(0, str(ROOT))
    from scripts.realservices import hermes

    print("Kafka 3.9 (ZooKeeper mode) with Hermes 0.11 (scripts/realservices/hermes.py)")
    delivering = not peers.args.no_delivery
    workdir = peers.workdir / "hermes"
    with hermes.stack(
        workdir, peers.endpoints.zookeeper, consumers=delivering, request_log=peers.args.requests
    ) as stack:
        if peers.args.requests:
            peers.requests = broker_requests.RequestLog(workdir / "kafka-requests.log")
        if peers.args.no_publish:
            delivery(peers, stack)
            return
        brokers = {"kafka 3.9 broker": stack.kafka_pid}
        # Both JVMs are fresh: the first run on each gets a JIT warm-up as long as the other's.
        jit = peers.args.jvm_warmup
        log_dirs = workdir / "kafka-logs"
        ours = peers.httpbus_runs("kafka", stack.kafka, brokers, stack.kafka_pid, jit, log_dirs)
        name = f"bench{secrets.token_hex(3)}"
        topic_url = stack.create_topic(name, peers.args.partitions)
        spec = LoadSpec(
            url=topic_url,
            body=peers.payload.encode(),
            headers={"Content-Type": "application/octet-stream"},
            connections=peers.args.connections,
            threads=2,
            seconds=peers.args.seconds,
        )
        pids = {"hermes frontend": stack.frontend_pid, **brokers}
        theirs = peers.measure("Hermes 0.11 frontend", spec, pids, jit)
        print_batches(log_dirs, name)
        compare(ours, theirs)
        for line in peers.batch_lines:
            print(f"  {line}")
        if delivering:
            delivery(peers, stack)


def print_batches(log_dirs: Path, name_part: str) -> None:
    """The record batches the run wrote to each topic whose name has ``name_part`` (warm-up
    included): what the broker's work per message follows (bench/log_batches.py)."""
    with s.warn_on_error("read the broker's log segments"):
        for topic, found in log_batches.topic_batches(log_dirs, name_part).items():
            print(f"    batches of {topic}: {found.line()}")


def _unaccepted(refused: Counter[int]) -> str:
    """The posts not answered 201/202, by status (0: no answer, e.g. a client timeout).
    A post with no answer may still have been stored, so more may arrive than were
    accepted; that is what "20,000 of 19,999 arrived" once meant."""
    if not refused:
        return ""
    codes = ", ".join(f"{n:,} × {code or 'no answer'}" for code, n in sorted(refused.items()))
    return f" ({codes} not accepted; one unanswered may still be stored)"


def delivery(peers: Peers, stack: Any) -> None:
    """The same drain as ``bench/deliver.py``: N messages stored first, then one subscription
    started; msgs/s from its start to the last arrival at a fast local receiver, with the
    same in-flight limit; CPU of the pushing process and the broker during the drain."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    import deliver

    n, in_flight = peers.args.messages, peers.args.in_flight
    print(f"delivery: {n:,} messages of {peers.args.size} B, in flight {in_flight}")
    broker = {"kafka 3.9 broker": stack.kafka_pid}
    # httpbus: bench/deliver.py's own throughput run, on the same broker.
    args = deliver.parse_args(
        ["--backend", "kafka", "--messages", str(n), "--throughput-only"]
        + ["--in-flight", str(in_flight), "--size", str(peers.args.size)]
        + ["--services-file", str(peers.args.services_file)]
        + ["--processes", str(peers.args.worker_processes)]
        + ["--shards", str(peers.args.worker_processes)]
    )
    endpoints = dataclasses.replace(peers.endpoints, kafka=stack.kafka)
    ours = deliver.Bench(args, endpoints, peers.workdir / "deliver-httpbus")
    ours.workdir.mkdir(parents=True, exist_ok=True)
    with ours.services():
        broker_before = s.session_cpu_s(stack.kafka_pid)
        ours.throughput("kafka", groups=0)
        broker_s = s.session_cpu_s(stack.kafka_pid) - broker_before  # produce and drain both
        our_steady = _steady(ours.arrivals("kafka-ungrouped"))
    row = ours.rows[-1]
    # Hermes: produce through its frontend, then start the subscription.
    port = s.free_port()
    argv = [sys.executable, str(ROOT / "bench" / "deliver.py"), "receiver", "--port", str(port)]
    with s.Server("receiver", argv, port, peers.workdir / "receiver.log") as receiver:
        topic = f"drain{secrets.token_hex(3)}"
        url = stack.create_topic(topic, peers.args.partitions)
        stack.create_subscription(topic, "s1", f"{receiver.url}/hermes", in_flight)
        body = json.dumps({"payload": peers.payload[: max(0, peers.args.size - 14)]}).encode()

        def post(_: int) -> int:
            try:
                return client.post(url, content=body).status_code
            except httpx.HTTPError:  # not accepted; the drain waits only for the accepted
                return 0

        with httpx.Client(timeout=30) as client, ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(post, range(n)))
        accepted = sum(1 for code in statuses if code in (201, 202))
        refused = Counter(code for code in statuses if code not in (201, 202))
        load = s.load_average()
        pids = {"hermes consumers": stack.consumers_pid, **broker}
        before = {name: s.session_cpu_s(pid) for name, pid in pids.items()}
        t0 = time.time()
        stack.activate(topic, "s1")
        deadline, got = time.monotonic() + max(120.0, n / 200), 0
        while time.monotonic() < deadline and got < accepted:
            got = int(httpx.get(f"{receiver.url}/count/hermes", timeout=10).text)
            time.sleep(0.05)
        cpu = {name: s.session_cpu_s(pid) - before[name] for name, pid in pids.items()}
        arrivals = httpx.get(f"{receiver.url}/dump/hermes", timeout=60).json()
    last = max(arrivals.values(), default=t0)
    rate = len(arrivals) / max(last - t0, 1e-6)
    first = min(arrivals.values(), default=t0) - t0
    steady = _steady(arrivals)
    print(
        f"  Hermes 0.11 consumers: {s.fmt(rate, 0)} msgs/s start to last arrival, "
        f"{s.fmt(steady, 0)} first to last; {len(arrivals):,} arrived of {accepted:,} "
        f"accepted{_unaccepted(refused)}, the first after {first:.2f} s "
        f"(load average before: {s.fmt(load, 2)})"
    )
    per_1000 = {name: 1000 * sec / max(1, len(arrivals)) for name, sec in cpu.items()}
    # worker_cpu is its share of a core during the drain, which took n / msgs_per_s seconds.
    ours_worker = 1000 * row.worker_cpu / row.msgs_per_s if row.msgs_per_s else math.nan
    rows = [
        [
            f"httpbus worker ({peers.args.worker_processes} process(es))",
            s.fmt(row.msgs_per_s, 0),
            s.fmt(our_steady, 0),
            f"worker {s.fmt(ours_worker, 3)}; broker {s.fmt(1000 * broker_s / n, 3)} "
            "(its produce too)",
            s.fmt(row.load, 2),
        ],
        [
            "Hermes 0.11 consumers",
            s.fmt(rate, 0),
            s.fmt(steady, 0),
            "; ".join(f"{k} {s.fmt(v, 3)}" for k, v in per_1000.items()),
            s.fmt(load, 2),
        ],
    ]
    print()
    headers = ["delivery", "msgs/s from start", "msgs/s first to last"]
    s.print_table([*headers, "CPU-s per 1,000 msgs", "load"], rows)
    if rate > 0 and steady > 0:
        print(
            f"\n  ratio of msgs/s: {row.msgs_per_s / rate:.2f}x from start, "
            f"{our_steady / steady:.2f}x first to last\n"
        )


def _steady(arrivals: dict[str, float]) -> float:
    """msgs/s from the first arrival to the last (the steady state, start-up left out)."""
    if len(arrivals) < 2:
        return math.nan
    times = arrivals.values()
    return (len(arrivals) - 1) / max(max(times) - min(times), 1e-6)


def _brokers_ratio(run: Run, peer: Run) -> str:
    """The ratio of each broker's CPU per message that both runs used (the shared one)."""
    shared = sorted(name for name in run.cpu_s if "broker" in name and name in peer.cpu_s)
    ratios = [
        f"{run.per_1000(name) / peer.per_1000(name):.2f}x"
        for name in shared
        if peer.per_1000(name) > 0
    ]
    return ", ".join(ratios) or "-"


def compare(ours: list[Run], peer: Run) -> None:
    """Each httpbus run beside the peer's, and the ratios."""
    rows = []
    for run in [*ours, peer]:
        processes = ", ".join(
            f"{name} {s.fmt(run.per_1000(name), 3)}" for name in sorted(run.cpu_s)
        )
        rows.append(
            [
                run.scenario,
                s.fmt(run.msgs_per_s, 0),
                s.fmt(run.result.p50_ms, 2),
                s.fmt(run.result.p99_ms, 2),
                s.fmt(run.total_per_1000, 3),
                s.fmt(run.load, 2),
                processes,
            ]
        )
    print()
    headers = ["scenario", "msgs/s", "p50 ms", "p99 ms", "CPU-s/1k", "load", "CPU-s per 1,000"]
    s.print_table(headers, rows)
    ratios = []
    for run in ours:
        ratios.append(
            [
                f"{run.scenario} / {peer.scenario}",
                f"{run.msgs_per_s / peer.msgs_per_s:.2f}x",
                f"{run.total_per_1000 / peer.total_per_1000:.2f}x",
                _brokers_ratio(run, peer),
                f"{run.result.p99_ms / peer.result.p99_ms:.2f}x",
            ]
        )
    print()
    s.print_table(["ratio", "msgs/s", "CPU per msg", "broker CPU per msg", "p99"], ratios)
    print()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=10.0, help="length of each measured run")
    p.add_argument("--warmup", type=float, default=2.0, help="unmeasured run before each")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--size", type=int, default=1024, help="message size in bytes")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--hermes", action="store_true", help="also Hermes on a Kafka 3.9 broker")
    p.add_argument(
        "--jvm-warmup",
        type=float,
        default=10.0,
        help="warm-up of the first run on each side (the brokers' and Hermes's JVMs may be fresh)",
    )
    p.add_argument("--no-pulsar", action="store_true", help="skip the Pulsar comparison")
    p.add_argument("--no-delivery", action="store_true", help="skip the Hermes delivery drain")
    p.add_argument("--no-publish", action="store_true", help="with --hermes: only the drain")
    p.add_argument("--messages", type=int, default=20_000, help="of the delivery drain")
    p.add_argument("--in-flight", type=int, default=200, help="of the delivery drain")
    p.add_argument(
        "--linger-ms",
        type=int,
        nargs="+",
        default=[5],
        help="httpbus's Kafka linger.ms (default 5, as shipped); several: a pair of runs each",
    )
    p.add_argument(
        "--requests",
        action="store_true",
        help="with --hermes: the broker logs every request and each run prints them by client and"
        " API per 1,000 messages (bench/broker_requests.py); the logging costs the broker CPU",
    )
    p.add_argument(
        "--batch",
        type=int,
        default=100,
        help="with --hermes: also batch publish, N messages a request, beside the raw client"
        " (0: not)",
    )
    p.add_argument("--producer-processes", type=int, default=1, help="of httpbus's producer")
    p.add_argument(
        "--worker-processes",
        type=int,
        default=1,
        help="of httpbus's worker in the drain; N > 1 shards the subscription N ways",
    )
    s.add_run_args(p)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    endpoints, workdir = s.bench_setup(args, "httpbus-bench-peers-")
    peers = Peers(args, endpoints, workdir)
    print(
        f"== peers: {args.seconds:g}s per run, {args.connections} connections, {args.size} B "
        f"messages, {args.partitions} partitions; {os.cpu_count()} CPUs; load average "
        f"{s.fmt(s.load_average(), 2)}\n"
    )

    def run() -> None:
        if not args.no_pulsar:
            run_pulsar(peers)
        if args.hermes:
            run_hermes(peers)

    if not s.ran_to_the_end(run):
        return 130
    print(
        "CPU-s per 1,000: CPU-seconds each process used during the run per 1,000 accepted "
        "messages (the shared brokers' figure includes whatever else they served meanwhile); "
        f"logs and wrk outputs: {workdir}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

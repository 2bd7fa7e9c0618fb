"""Allegro Hermes 0.11 and the Kafka it needs, for ``bench/peers.py`` only (not ``make test``).

Hermes 0.11.0 (2017) speaks the Kafka 0.10 protocol and keeps its metadata in ZooKeeper, so
:func:`stack` starts, each as a child process on free loopback ports:

- a Kafka 3.9 broker in ZooKeeper mode (``poms/kafka-zk``; 3.9 is the last line with
  ZooKeeper mode and still reads the 0.10 protocol), on the shared ZooKeeper under a fresh
  chroot of its own;
- Hermes management (Spring Boot; creates groups and topics) and the frontend (publishing),
  from ``poms/hermes-*``: the 0.11.0 artifacts, minus a JDK 8 ``tools.jar`` their POMs name,
  plus the JAXB, activation and ``javax.annotation`` jars that Java 8 carried and Java 17
  has not, and ``--add-opens`` for the reflection Jersey, HK2 and Undertow do;
- Hermes consumers (delivery) with its rate limit raised from 400/s (``--consumers``).

Everything is stopped and the ZooKeeper chroot deleted on the way out, also on Ctrl-C. The
shared ZooKeeper is only ever written under that chroot::

    with stack(Path("/tmp/hermes"), "127.0.0.1:2181") as hermes:
        url = hermes.create_topic("bench1", partitions=4)   # POST a message there
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from . import maven, ports
from .servers import HOST, _kafka_metadata

DEFAULT_CACHE = Path.home() / ".cache" / "httpbus" / "realservices"
# Jersey 2.23, HK2, Spring Boot 1.x and Undertow 1.4 reflect into these on Java 17.
OPENS = [
    "java.base/java.lang",
    "java.base/java.lang.reflect",
    "java.base/java.lang.invoke",
    "java.base/java.util",
    "java.base/java.util.concurrent",
    "java.base/java.io",
    "java.base/java.net",
    "java.base/java.nio",
    "java.base/sun.nio.ch",
    "java.base/jdk.internal.misc",
    "java.base/java.security",
    "java.base/java.text",
    "java.desktop/java.beans",
]
GROUP = "bench"
LOG4J = """\
log4j.rootLogger=WARN, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=%d %p %c - %m%n
"""
# The broker's request logger (opt-in: one line per request costs the broker CPU): every
# request it completed, with its API and client id, for bench/peers.py --requests.
REQUEST_LOG4J = """\
log4j.logger.kafka.request.logger=DEBUG, requests
log4j.additivity.kafka.request.logger=false
log4j.appender.requests=org.apache.log4j.FileAppender
log4j.appender.requests.File={path}
log4j.appender.requests.layout=org.apache.log4j.PatternLayout
log4j.appender.requests.layout.ConversionPattern=%m%n
"""
PARTS = ["kafka-zk", "hermes-management", "hermes-frontend", "hermes-consumers"]
START_TIMEOUT_S = 180.0


def free_port() -> int:
    return ports.free_port(HOST)


@dataclass
class Stack:
    """The running Kafka 3.9 broker and Hermes services."""

    kafka: str
    kafka_pid: int
    management_url: str
    frontend_url: str
    frontend_pid: int
    consumers_pid: int | None = None
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def create_topic(self, name: str, partitions: int, ack: str = "ALL") -> str:
        """A Hermes topic ``bench.<name>`` (acks=all, as httpbus); the URL to POST to."""
        _post(f"{self.management_url}/groups", {"groupName": GROUP})
        topic = {
            "name": f"{GROUP}.{name}",
            "description": "bench/peers.py",
            "ack": ack,
            "contentType": "JSON",
            "retentionTime": {"duration": 1},
            "owner": {"source": "Plaintext", "id": "bench"},
        }
        _post(f"{self.management_url}/topics", topic)
        _wait(lambda: _status(f"{self.frontend_url}/topics/{GROUP}.{name}", b"{}") < 400, 60)
        del partitions  # Hermes 0.11 takes the partition count of its Kafka default
        return f"{self.frontend_url}/topics/{GROUP}.{name}"

    def create_subscription(self, topic: str, name: str, endpoint: str, in_flight: int) -> None:
        """A suspended subscription of ``topic`` (``bench.<name>``) pushing to ``endpoint``, its
        rate limit raised from Hermes's default 400/s so that it does not cap the drain."""
        subscription = {
            "name": name,
            "topicName": f"{GROUP}.{topic}",
            "endpoint": endpoint,
            "description": "bench/peers.py",
            "owner": {"source": "Plaintext", "id": "bench"},
            "contentType": "JSON",
            "state": "SUSPENDED",
            "subscriptionPolicy": {
                "rate": 1_000_000,
                "messageTtl": 3600,
                "inflightSize": in_flight,
            },
        }
        _post(f"{self.management_url}/topics/{GROUP}.{topic}/subscriptions", subscription)

    def activate(self, topic: str, name: str) -> None:
        url = f"{self.management_url}/topics/{GROUP}.{topic}/subscriptions/{name}/state"
        request = urllib.request.Request(
            url, b'"ACTIVE"', {"Content-Type": "application/json"}, method="PUT"
        )
        urllib.request.urlopen(request, timeout=30).close()


def _post(url: str, body: Mapping[str, object]) -> None:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        urllib.request.urlopen(request, timeout=30).close()
    except urllib.error.HTTPError as exc:
        text = exc.read()
        if exc.code != 409 and b"ALREADY_EXISTS" not in text:  # already there is fine
            raise RuntimeError(f"POST {url}: {exc.code} {text[:500]!r}") from exc


def _status(url: str, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 599


def _wait(
    ready: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode}")
        if ready():
            return
        time.sleep(0.5)
    raise RuntimeError(f"not ready within {timeout:g}s")


def _start(
    argv: list[str], log: Path, procs: list[subprocess.Popen[bytes]]
) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        # In the work folder: Hermes writes log files of its own into its working directory.
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=log.parent
        )
    procs.append(proc)
    return proc


def _java(cp: str, main: str, props: dict[str, object], heap: str = "-Xmx512m") -> list[str]:
    opens = [f"--add-opens={m}=ALL-UNNAMED" for m in OPENS]
    defines = [f"-D{k}={v}" for k, v in props.items()]
    return ["java", heap, "-Djava.net.preferIPv4Stack=true", *opens, *defines, "-cp", cp, main]


def _tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@contextlib.contextmanager
def stack(
    workdir: Path,
    zookeeper: str,
    *,
    consumers: bool = False,
    cache: Path = DEFAULT_CACHE,
    request_log: bool = False,
) -> Iterator[Stack]:
    """Kafka 3.9 (ZooKeeper mode) and Hermes management and frontend (and consumers),
    started and, on the way out, stopped; their ZooKeeper chroot deleted. ``request_log``:
    the broker logs every request it completes to ``workdir/kafka-requests.log``."""
    from kazoo.client import KazooClient

    workdir.mkdir(parents=True, exist_ok=True)
    root = f"/hermes-bench-{secrets.token_hex(4)}"
    zk = KazooClient(hosts=zookeeper, timeout=10)
    zk.start(timeout=10)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        zk.ensure_path(f"{root}/kafka")
        zk.ensure_path(f"{root}/hermes")
        kafka_zk, hermes_zk = f"{zookeeper}{root}/kafka", f"{zookeeper}{root}/hermes"
        kafka_port = free_port()
        bootstrap = f"{HOST}:{kafka_port}"
        props = workdir / "kafka.properties"
        props.write_text(
            "".join(
                f"{k}={v}\n"
                for k, v in {
                    "broker.id": 0,
                    "listeners": f"PLAINTEXT://{bootstrap}",
                    "advertised.listeners": f"PLAINTEXT://{bootstrap}",
                    "zookeeper.connect": kafka_zk,
                    "log.dirs": workdir / "kafka-logs",
                    "num.partitions": 4,
                    "offsets.topic.replication.factor": 1,
                    "offsets.topic.num.partitions": 4,
                    "transaction.state.log.replication.factor": 1,
                    "transaction.state.log.min.isr": 1,
                    "group.initial.rebalance.delay.ms": 0,
                    "auto.create.topics.enable": "true",
                    "min.insync.replicas": 1,
                }.items()
            )
        )
        kafka_cp = maven.classpath("kafka-zk", cache)
        log4j = workdir / "log4j.properties"
        requests = REQUEST_LOG4J.format(path=workdir / "kafka-requests.log")
        log4j.write_text(LOG4J + (requests if request_log else ""))
        kafka_argv = [
            "java",
            "-Xms256m",
            "-Xmx512m",
            "-Djava.net.preferIPv4Stack=true",
            f"-Dlog4j.configuration=file:{log4j}",
            "-cp",
            kafka_cp,
            "kafka.Kafka",
            str(props),
        ]
        kafka_log = workdir / "kafka.log"
        ready = partial(_kafka_metadata, bootstrap)
        kafka_proc = _start_ready("kafka 3.9", kafka_argv, kafka_log, procs, ready)

        mgmt_port, front_port = free_port(), free_port()
        mgmt_argv = _java(
            maven.classpath("hermes-management", cache),
            "pl.allegro.tech.hermes.management.HermesManagement",
            {},
        ) + [
            f"--server.port={mgmt_port}",
            "--kafka.clusters[0].clusterName=primary",
            f"--kafka.clusters[0].connectionString={kafka_zk}",
            f"--storage.connectionString={hermes_zk}",
            "--topic.replicationFactor=1",
            "--topic.partitions=4",
        ]
        mgmt_url = f"http://{HOST}:{mgmt_port}"
        _start_ready(
            "hermes management",
            mgmt_argv,
            workdir / "management.log",
            procs,
            lambda: _status(f"{mgmt_url}/topics") == 200,
        )
        common = {
            "zookeeper.connect.string": hermes_zk,
            "kafka.zookeeper.connect.string": kafka_zk,
            "kafka.broker.list": bootstrap,
            "kafka.cluster.name": "primary",
            "metrics.zookeeper.reporter": "false",
            "metrics.graphite.reporter": "false",
        }
        front_argv = _java(
            maven.classpath("hermes-frontend", cache),
            "pl.allegro.tech.hermes.frontend.HermesFrontend",
            {**common, "frontend.port": front_port, "frontend.host": HOST},
        )
        front_url = f"http://{HOST}:{front_port}"
        front = _start_ready(
            "hermes frontend",
            front_argv,
            workdir / "frontend.log",
            procs,
            lambda: _status(f"{front_url}/status/ping") == 200,
        )
        hermes = Stack(bootstrap, kafka_proc.pid, mgmt_url, front_url, front.pid, procs=procs)
        if consumers:
            cons_argv = _java(
                maven.classpath("hermes-consumers", cache),
                "pl.allegro.tech.hermes.consumers.HermesConsumers",
                {
                    **common,
                    "consumer.status.health.port": free_port(),
                    # A new subscription reads what its topic holds (as a paused one of ours).
                    "kafka.consumer.auto.offset.reset": "earliest",
                },
            )
            hermes.consumers_pid = _start(cons_argv, workdir / "consumers.log", procs).pid
        yield hermes
    finally:
        for proc in reversed(procs):
            _stop(proc)
        with contextlib.suppress(Exception):
            zk.delete(root, recursive=True)
        zk.stop()
        zk.close()


def _start_ready(
    name: str,
    argv: list[str],
    log: Path,
    procs: list[subprocess.Popen[bytes]],
    ready: Callable[[], bool],
) -> subprocess.Popen[bytes]:
    """``_start`` the process, then wait until ``ready``; an error names it and ends with
    its log."""
    proc = _start(argv, log, procs)
    try:
        _wait(ready, START_TIMEOUT_S, proc)
    except RuntimeError as exc:
        message = f"{name} did not start ({exc}); its log {log} ends:\n{_tail(log)}"
        raise RuntimeError(message) from None
    return proc


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)


def fetch(cache: Path = DEFAULT_CACHE) -> None:
    """Resolve every jar of the stack now (cached: later runs start at once)."""
    for part in PARTS:
        print(f"{part}: {len(maven.classpath(part, cache).split(':'))} jars")


if __name__ == "__main__":  # python -m scripts.realservices.hermes: fetch the jars
    fetch()

"""What each server needs: its config files, its command line and a readiness probe.

Each probe asks the real protocol a real question: ZooKeeper ``ruok``, a Kafka metadata
request, a Pulsar admin call that only succeeds once the default namespace exists.
"""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.1"

LOG4J2 = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %-5p [%t] %c{1} - %m%n
rootLogger.level = {level}
rootLogger.appenderRef.stdout.ref = STDOUT
"""

# From Pulsar's bin/pulsar: the broker reflects into these JDK internals.
PULSAR_OPENS = [
    "java.base/java.io",
    "java.base/java.util.zip",
    "java.base/java.nio",
    "java.base/jdk.internal.misc",
    "java.base/jdk.internal.platform",
    "java.management/sun.management",
    "jdk.management/com.sun.management.internal",
]


@dataclass(frozen=True)
class Ports:
    zookeeper: int = 2181
    kafka: int = 9092
    kafka_controller: int = 9093
    pulsar: int = 6650
    pulsar_web: int = 8080
    bookie: int = 3181
    postgres: int = 5439  # not 5432: a system PostgreSQL may hold that one
    s3: int = 8710


@dataclass(frozen=True)
class Launch:
    """Commands that must succeed first (``pre``), then the server's own command line."""

    argv: list[str]
    pre: list[list[str]] = field(default_factory=list)


@dataclass(frozen=True)
class Server:
    """One server: ``prepare(data_dir, classpath)`` writes its config, up once ``ready()``."""

    name: str
    prepare: Callable[[Path, str], Launch]
    ready: Callable[[], bool]
    start_timeout: float
    # What ``prepare`` gets as its second argument; None: the classpath of ``poms/<name>``.
    resolve: Callable[[], str] | None = None
    stop_signal: signal.Signals = signal.SIGTERM
    pom: str = ""  # the ``poms/<pom>`` whose classpath it runs on; "" : its name's


@dataclass(frozen=True)
class Topology:
    """The servers of one run folder, by name, and what clients connect to (the state
    file's ``endpoints``): :func:`single` here, the cluster in ``cluster.py``."""

    servers: dict[str, Server]
    endpoints: dict[str, str]


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _props(items: dict[str, object]) -> str:
    return "".join(f"{key}={value}\n" for key, value in items.items())


def _java(cp: str, heap: list[str], extra: list[str], main: str, args: list[str]) -> list[str]:
    return ["java", *heap, "-Djava.net.preferIPv4Stack=true", *extra, "-cp", cp, main, *args]


def _log4j(data: Path, level: str = "INFO") -> str:
    return str(_write(data / "log4j2.properties", LOG4J2.replace("{level}", level)))


# ---------------------------------------------------------------- ZooKeeper


def zookeeper(ports: Ports) -> Server:
    def prepare(data: Path, cp: str) -> Launch:
        cfg = _write(
            data / "zoo.cfg",
            _props(
                {
                    "tickTime": 2000,
                    "initLimit": 10,
                    "syncLimit": 5,
                    "dataDir": data / "data",
                    "clientPort": ports.zookeeper,
                    "clientPortAddress": HOST,
                    # The AdminServer would take 8080, Pulsar's web port.
                    "admin.enableServer": "false",
                    "4lw.commands.whitelist": "ruok,srvr,stat",
                    "maxClientCnxns": 0,
                }
            ),
        )
        return Launch(
            _java(
                cp,
                ["-Xmx256m"],
                ["-Dzookeeper.jmx.log4j.disable=true"],
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                [str(cfg)],
            )
        )

    def ready() -> bool:
        # ``ruok`` answers imok even when the server inside failed to start; ``srvr``
        # reports a mode only once it serves requests.
        return b"Mode: standalone" in _four_letter(ports.zookeeper, b"srvr")

    return Server("zookeeper", prepare, ready, start_timeout=60)


def _four_letter(port: int, word: bytes, host: str = HOST) -> bytes:
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(word)
            return sock.recv(4096)
    except OSError:
        return b""


# ---------------------------------------------------------------- Kafka (KRaft)


def kafka_cluster_id() -> str:
    """A Kafka ``Uuid`` string: 16 random bytes, URL-safe base64 without padding.

    Never one that starts with ``-``: the storage tool's argument parser reads it as an
    option (``--cluster-id/-t: expected one argument``), and Kafka's own ``Uuid.randomUuid``
    draws again in that case too.
    """
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def kafka(ports: Ports) -> Server:
    def prepare(data: Path, cp: str) -> Launch:
        plain, ctrl = f"{HOST}:{ports.kafka}", f"{HOST}:{ports.kafka_controller}"
        quorum = {"controller.quorum.bootstrap.servers": ctrl}
        settings = kafka_properties(1, data, plain, ctrl, quorum, replicas=1, min_isr=1)
        props = _write(data / "server.properties", _props(settings))
        log4j = _log4j(data)
        heap = ["-Xms256m", "-Xmx512m"]
        flags = [f"-Dlog4j2.configurationFile={log4j}"]
        fmt = _java(
            cp,
            heap,
            flags,
            "kafka.tools.StorageTool",
            [
                "format",
                "--standalone",
                "-t",
                kafka_cluster_id(),
                "-c",
                str(props),
            ],
        )
        return Launch(_java(cp, heap, flags, "kafka.Kafka", [str(props)]), pre=[fmt])

    def ready() -> bool:
        return _kafka_metadata(f"{HOST}:{ports.kafka}")

    return Server("kafka", prepare, ready, start_timeout=90)


def kafka_properties(
    node: int,
    data: Path,
    plain: str,
    ctrl: str,
    quorum: dict[str, str],
    *,
    replicas: int,
    min_isr: int,
    advertised: str = "",
) -> dict[str, object]:
    """A KRaft node that is both broker and controller: listening on ``plain`` (clients
    and the other brokers, which reach it at ``advertised`` when given: a proxy in front of
    it) and ``ctrl`` (the quorum), its topics and the internal ones replicated ``replicas``
    times with ``min_isr`` in sync, unclean leader election off."""
    return {
        "process.roles": "broker,controller",
        "node.id": node,
        **quorum,
        "listeners": f"PLAINTEXT://{plain},CONTROLLER://{ctrl}",
        "advertised.listeners": f"PLAINTEXT://{advertised or plain},CONTROLLER://{ctrl}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": data / "logs",
        "num.partitions": 1,
        "default.replication.factor": replicas,
        "min.insync.replicas": min_isr,
        "offsets.topic.replication.factor": replicas,
        "offsets.topic.num.partitions": 4,
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "unclean.leader.election.enable": "false",
        "group.initial.rebalance.delay.ms": 0,
        "auto.create.topics.enable": "false",
    }


def _kafka_metadata(bootstrap: str) -> bool:
    from confluent_kafka.admin import AdminClient  # the venv has it; the JVMs do not need it

    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
    except Exception:  # any client error means "not yet"
        return False
    return bool(meta.brokers)


# ---------------------------------------------------------------- Pulsar standalone


def pulsar(ports: Ports) -> Server:
    def prepare(data: Path, cp: str) -> Launch:
        conf = _write(
            data / "standalone.conf",
            _props(
                {
                    "clusterName": "standalone",
                    "brokerServicePort": ports.pulsar,
                    "webServicePort": ports.pulsar_web,
                    "bindAddress": HOST,
                    "advertisedAddress": HOST,
                    "managedLedgerDefaultEnsembleSize": 1,
                    "managedLedgerDefaultWriteQuorum": 1,
                    "managedLedgerDefaultAckQuorum": 1,
                    "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
                    "brokerDeleteInactiveTopicsEnabled": "false",
                    "allowAutoTopicCreation": "false",
                    # A reader at the tail hears of a new entry at once, not 10 ms later (the
                    # default): that delay is most of a delivery's latency (docs/deploy.md).
                    "managedLedgerNewEntriesCheckDelayInMillis": 0,
                    # Tests only: the bookie journal is not fsynced.
                    "journalSyncData": "false",
                    # Bookie settings are read from the same file.
                    "bookiePort": ports.bookie,
                    "httpServerEnabled": "false",
                    "dbStorage_writeCacheMaxSizeMb": 32,
                    "dbStorage_readAheadCacheMaxSizeMb": 32,
                    "dbStorage_rocksDB_blockCacheSize": 16777216,
                }
            ),
        )
        heap = ["-Xms512m", "-Xmx1g", "-XX:MaxDirectMemorySize=512m"]
        flags = [*pulsar_jvm_flags(data), "-Dpulsar.allocator.exit_on_oom=true"]
        return Launch(
            _java(
                cp,
                heap,
                flags,
                "org.apache.pulsar.PulsarStandaloneStarter",
                [
                    "-c",
                    str(conf),
                    "-nfw",
                    "-nss",
                    "-a",
                    HOST,
                    "--metadata-dir",
                    str(data / "metadata"),
                    "--bookkeeper-dir",
                    str(data / "bookkeeper"),
                    "--bookkeeper-port",
                    str(ports.bookie),
                ],
            )
        )

    return Server("pulsar", prepare, pulsar_ready(ports.pulsar_web), start_timeout=180)


def pulsar_jvm_flags(data: Path) -> list[str]:
    """What a Pulsar JVM (standalone, broker or bookie) needs: the JDK internals it reflects
    into, and its log configuration in ``data``."""
    return [
        *(f"--add-opens={mod}=ALL-UNNAMED" for mod in PULSAR_OPENS),
        "-Dio.netty.tryReflectionSetAccessible=true",
        f"-Dlog4j2.configurationFile={_log4j(data)}",
    ]


def pulsar_ready(web_port: int) -> Callable[[], bool]:
    """Ready once the broker on ``web_port`` lists the ``public/default`` namespace."""

    def ready() -> bool:
        url = f"http://{HOST}:{web_port}/admin/v2/namespaces/public"
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return "public/default" in json.loads(resp.read())
        except (OSError, ValueError):
            return False

    return ready


# ---------------------------------------------------------------- PostgreSQL (Debian package)

PG_USER = "httpbus"
PG_DATABASE = "postgres"


def postgres_bin() -> str:
    """The folder of Debian's PostgreSQL binaries, installed with apt-get when missing (as
    root; otherwise the error says what to install)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    if not found:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            raise RuntimeError(
                "PostgreSQL not found: install it with 'apt-get install -y postgresql'"
            )
        for argv in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "postgresql"]):
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"{' '.join(argv)} failed:\n{(done.stdout + done.stderr)[-2000:]}"
                )
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return str(Path(found[-1]).parent)


def _as_postgres_user(argv: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: as root, drop to the ``postgres`` user of the Debian
    package. ``setpriv`` execs (no child in between) and ``--pdeathsig keep`` re-arms the
    parent-death signal the credential change would clear."""
    if os.geteuid() != 0:
        return argv
    return [
        "setpriv",
        "--reuid=postgres",
        "--regid=postgres",
        "--init-groups",
        "--pdeathsig=keep",
        "--",
        *argv,
    ]


def postgres(ports: Ports) -> Server:
    def prepare(data: Path, bindir: str) -> Launch:
        pgdata = data / "pgdata"
        if os.geteuid() == 0:
            shutil.chown(data, "postgres", "postgres")
            for parent in (data.parent, *data.parent.parents):  # let it reach its folder
                if parent.stat().st_mode & 0o001 == 0:
                    parent.chmod(parent.stat().st_mode | 0o001)
        initdb = [f"{bindir}/initdb", "-D", str(pgdata), "-U", PG_USER, "--auth=trust"]
        initdb += ["-E", "UTF8", "--no-sync", "--no-instructions"]
        server = [f"{bindir}/postgres", "-D", str(pgdata), "-h", HOST, "-p", str(ports.postgres)]
        server += ["-c", "unix_socket_directories=", "-c", "fsync=off"]  # tests only: no fsync
        server += ["-c", "max_connections=200"]
        # The outbox's CDC engine (Debezium) reads the write-ahead log by logical replication.
        server += ["-c", "wal_level=logical", "-c", "max_replication_slots=20"]
        server += ["-c", "max_wal_senders=20"]
        return Launch(_as_postgres_user(server), pre=[_as_postgres_user(initdb)])

    def ready() -> bool:
        import psycopg  # the venv has it; PostgreSQL itself does not need it

        try:
            with psycopg.connect(_pg_url(ports), connect_timeout=2) as conn:
                return conn.execute("select 1").fetchone() == (1,)
        except psycopg.Error:
            return False

    # SIGINT is PostgreSQL's fast shutdown; SIGTERM (smart) would wait for every client.
    return Server(
        "postgres",
        prepare,
        ready,
        start_timeout=60,
        resolve=postgres_bin,
        stop_signal=signal.SIGINT,
    )


def _pg_url(ports: Ports) -> str:
    return f"postgresql://{PG_USER}@{HOST}:{ports.postgres}/{PG_DATABASE}"


# ---------------------------------------------------------------- S3Proxy (S3-compatible)

S3_IDENTITY = "httpbus"
S3_CREDENTIAL = "httpbus-secret"
S3_BUCKET = "httpbus-archive"
LOGBACK_WARN = """\
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{HH:mm:ss.SSS} %-5level %logger{20} - %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDOUT"/></root>
</configuration>
"""


def s3proxy(ports: Ports) -> Server:
    """S3Proxy over a local folder: the S3-compatible object store the archive's tests write
    to (docs/archive.md). ``filesystem-nio2`` lists objects only (the older ``filesystem``
    provider lists folders as objects); obstore's bulk delete sends a checksum header S3Proxy
    does not know, which ``ignore-unknown-headers`` lets through. The bucket is a folder of
    the base directory, made here."""

    def prepare(data: Path, cp: str) -> Launch:
        base = data / "blobs"
        (base / S3_BUCKET).mkdir(parents=True, exist_ok=True)
        conf = _write(
            data / "s3proxy.conf",
            _props(
                {
                    "s3proxy.endpoint": f"http://{HOST}:{ports.s3}",
                    "s3proxy.authorization": "aws-v2-or-v4",
                    "s3proxy.identity": S3_IDENTITY,
                    "s3proxy.credential": S3_CREDENTIAL,
                    "s3proxy.ignore-unknown-headers": "true",
                    "jclouds.provider": "filesystem-nio2",
                    "jclouds.identity": S3_IDENTITY,
                    "jclouds.credential": S3_CREDENTIAL,
                    "jclouds.filesystem.basedir": base,
                }
            ),
        )
        logback = _write(data / "logback.xml", LOGBACK_WARN)
        flags = [f"-Dlogback.configurationFile={logback}"]
        main = "org.gaul.s3proxy.Main"
        return Launch(_java(cp, ["-Xmx256m"], flags, main, ["--properties", str(conf)]))

    def ready() -> bool:
        # Unsigned, S3Proxy answers 403 AccessDenied: it is up and speaks S3.
        try:
            urllib.request.urlopen(f"http://{HOST}:{ports.s3}/{S3_BUCKET}", timeout=2)
        except urllib.error.HTTPError as exc:
            return exc.code == 403
        except OSError:
            return False
        return True

    return Server("s3proxy", prepare, ready, start_timeout=60)


def all_servers(ports: Ports) -> dict[str, Server]:
    servers = (zookeeper(ports), kafka(ports), pulsar(ports), postgres(ports), s3proxy(ports))
    return {s.name: s for s in servers}


def single(ports: Ports) -> Topology:
    """One node of each server: the suite's and ``make run-real``'s."""
    return Topology(all_servers(ports), endpoints(ports))


def endpoints(ports: Ports) -> dict[str, str]:
    """What clients connect to; the tests read these from the state file."""
    return {
        "zookeeper": f"{HOST}:{ports.zookeeper}",
        "kafka": f"{HOST}:{ports.kafka}",
        "pulsar": f"pulsar://{HOST}:{ports.pulsar}",
        "pulsar_admin": f"http://{HOST}:{ports.pulsar_web}",
        "postgres": _pg_url(ports),
        "s3": f"http://{HOST}:{ports.s3}",
        "s3_bucket": S3_BUCKET,
        "s3_access_key_id": S3_IDENTITY,
        "s3_secret_access_key": S3_CREDENTIAL,
    }

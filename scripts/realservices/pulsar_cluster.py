"""Pulsar on the cluster topology's ZooKeeper ensemble (issue 34): three bookies and two
brokers, each a :class:`~.servers.Server` a test kills and restarts (``bookie-2``,
``pulsar-broker-1``).

- Metadata: made once, before the first bookie starts (its ``pre`` step), by
  ``PulsarClusterMetadataSetup``: the cluster, the ``public/default`` namespace and
  BookKeeper's ledgers root (``/ledgers``) in the ensemble.
- Bookies: loopback allowed, journal not fsynced (tests only), small caches; ready once
  registered as writable under ``/ledgers/available``.
- Brokers: every ledger on all three bookies (ensemble 3, write quorum 3, ack quorum 2),
  the standalone's other settings (no topic auto-creation, readers woken at once); ready
  once their admin API lists ``public/default``.

Heaps: a bookie 256 MB, a broker 512 MB (plus their direct memory).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from .servers import (
    HOST,
    Launch,
    Server,
    _java,
    _props,
    _write,
    pulsar_jvm_flags,
    pulsar_ready,
)

BOOKIES = 3
BROKERS = 2
CLUSTER = "chaos"
SETUP = "org.apache.pulsar.PulsarClusterMetadataSetup"
# The setup gives up at once on an ensemble still electing its leader (ConnectionLoss), and
# the peers start beside it: a step before it waits (90 s at most) until one serves.
QUORUM_WAIT = """\
import socket, sys, time
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    for hostport in sys.argv[1].split(","):
        host, port = hostport.rsplit(":", 1)
        try:
            with socket.create_connection((host, int(port)), timeout=2) as sock:
                sock.sendall(b"srvr")
                answer = sock.recv(4096)
            if b"Mode: leader" in answer or b"Mode: follower" in answer:
                sys.exit(0)
        except OSError:
            pass
    time.sleep(0.5)
sys.exit("no ZooKeeper peer serving within 90 s: " + sys.argv[1])
"""


@dataclass(frozen=True)
class PulsarPorts:
    """Per bookie its port; per broker its binary protocol and web (admin) ports."""

    bookie: tuple[int, ...]
    broker: tuple[int, ...]
    web: tuple[int, ...]


def _zk(zookeeper: str) -> str:
    """BookKeeper's metadata service URI: hosts separated by ``;``."""
    return f"zk+null://{zookeeper.replace(',', ';')}/ledgers"


def _setup(data: Path, cp: str, zookeeper: str, ports: PulsarPorts) -> list[str]:
    args = ["-c", CLUSTER, "-md", f"zk:{zookeeper}", "-cms", f"zk:{zookeeper}"]
    args += ["-uw", ",".join(f"http://{HOST}:{p}" for p in ports.web)]
    args += ["-ub", service_url(ports), "-bn", "4", "--zookeeper-session-timeout-ms", "30000"]
    return _java(cp, ["-Xmx128m"], pulsar_jvm_flags(data), SETUP, args)


def bookie(node: int, zookeeper: str, ports: PulsarPorts) -> Server:
    """Bookie ``node`` (1-based); the first one makes the cluster's metadata first."""
    port = ports.bookie[node - 1]

    def prepare(data: Path, cp: str) -> Launch:
        settings = {
            "bookiePort": port,
            "advertisedAddress": HOST,
            "listeningInterface": "lo",
            "allowLoopback": "true",
            "metadataServiceUri": _zk(zookeeper),
            "zkTimeout": 6000,  # a killed bookie's registration goes within 6 s
            "journalDirectories": data / "journal",
            "ledgerDirectories": data / "ledgers",
            "journalSyncData": "false",  # tests only, as the standalone
            "httpServerEnabled": "false",
            "dbStorage_writeCacheMaxSizeMb": 16,
            "dbStorage_readAheadCacheMaxSizeMb": 16,
            "dbStorage_rocksDB_blockCacheSize": 8388608,
            "diskUsageThreshold": 0.99,
            "diskUsageWarnThreshold": 0.98,
        }
        conf = _write(data / "bookie.conf", _props(settings))
        heap = ["-Xms128m", "-Xmx256m", "-XX:MaxDirectMemorySize=256m"]
        main = "org.apache.bookkeeper.server.Main"
        argv = _java(cp, heap, pulsar_jvm_flags(data), main, ["--conf", str(conf)])
        waits = [sys.executable, "-c", QUORUM_WAIT, zookeeper]
        pre = [waits, _setup(data, cp, zookeeper, ports)] if node == 1 else []
        return Launch(argv, pre=pre)

    def ready() -> bool:
        return _registered(zookeeper, f"{HOST}:{port}")

    return Server(f"bookie-{node}", prepare, ready, start_timeout=120, pom="pulsar")


def _registered(zookeeper: str, bookie_id: str) -> bool:
    from kazoo.client import KazooClient  # the venv has it; the JVMs do not need it

    zk = KazooClient(hosts=zookeeper, timeout=3)
    try:
        zk.start(timeout=3)
        return zk.exists(f"/ledgers/available/{bookie_id}") is not None
    except Exception:  # any client error means "not yet"
        return False
    finally:
        zk.stop()
        zk.close()


def broker(node: int, zookeeper: str, ports: PulsarPorts) -> Server:
    """Broker ``node`` (1-based) of the cluster."""
    web = ports.web[node - 1]

    def prepare(data: Path, cp: str) -> Launch:
        settings = {
            "clusterName": CLUSTER,
            "metadataStoreUrl": f"zk:{zookeeper}",
            "configurationMetadataStoreUrl": f"zk:{zookeeper}",
            "bookkeeperMetadataServiceUri": _zk(zookeeper),
            "brokerServicePort": ports.broker[node - 1],
            "webServicePort": web,
            "bindAddress": HOST,
            "advertisedAddress": HOST,
            "managedLedgerDefaultEnsembleSize": BOOKIES,
            "managedLedgerDefaultWriteQuorum": BOOKIES,
            "managedLedgerDefaultAckQuorum": 2,
            "managedLedgerCacheSizeMB": 32,
            "loadManagerClassName": "org.apache.pulsar.broker.loadbalance.NoopLoadManager",
            "brokerDeleteInactiveTopicsEnabled": "false",
            "allowAutoTopicCreation": "false",
            "managedLedgerNewEntriesCheckDelayInMillis": 0,
            "zooKeeperSessionTimeoutMillis": 6000,
        }
        conf = _write(data / "broker.conf", _props(settings))
        heap = ["-Xms256m", "-Xmx512m", "-XX:MaxDirectMemorySize=256m"]
        flags = [*pulsar_jvm_flags(data), "-Dpulsar.allocator.exit_on_oom=true"]
        main = "org.apache.pulsar.PulsarBrokerStarter"
        return Launch(_java(cp, heap, flags, main, ["--broker-conf", str(conf)]))

    return Server(
        f"pulsar-broker-{node}", prepare, pulsar_ready(web), start_timeout=150, pom="pulsar"
    )


def service_url(ports: PulsarPorts) -> str:
    """Both brokers: a client looks its topics up through either."""
    return "pulsar://" + ",".join(f"{HOST}:{p}" for p in ports.broker)


def pulsar_servers(zookeeper: str, ports: PulsarPorts) -> list[Server]:
    """The bookies, then the brokers (the first bookie makes the metadata first)."""
    bookies = [bookie(n, zookeeper, ports) for n in range(1, BOOKIES + 1)]
    return bookies + [broker(n, zookeeper, ports) for n in range(1, BROKERS + 1)]


def pulsar_endpoints(ports: PulsarPorts) -> dict[str, str]:
    return {"pulsar": service_url(ports), "pulsar_admin": f"http://{HOST}:{ports.web[0]}"}

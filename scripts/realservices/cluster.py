"""The cluster topology: a three-node ZooKeeper ensemble and three Kafka brokers on one
machine, as production runs them (issue 34), beside the single nodes of ``servers.py``.

- ZooKeeper: three peers (``zookeeper-1..3``), each with its client, quorum and election
  ports; ready once it serves as leader or follower.
- Kafka: three KRaft nodes (``kafka-1..3``), each a broker and a controller voter (a static
  quorum), replication factor 3, ``min.insync.replicas`` 2, unclean leader election off, the
  internal topics replicated likewise; ready once its metadata lists all three brokers.

- Pulsar (``cluster_topology(pulsar=True)``): three bookies and two brokers on the
  ensemble (``pulsar_cluster.py``): about 1.3 GB more (resident, just started).

- Behind proxies (``ClusterPorts.free(proxies=True)``): each Kafka node advertises a
  port of its own where a proxy (toxiproxy) forwards to it, so clients and the other
  brokers' replication reach it through that proxy; each controller is a voter at a proxy's
  port too, so the quorum's own traffic and the brokers' heartbeats to the active
  controller pass through proxies (``controller-n``); and the clients' ZooKeeper endpoints
  are proxies' ports too, the peers' own traffic direct.
  The caller starts the proxies (``tests/chaos/test_slow_network.py``).

- In namespaces (``cluster_topology(namespaces=True)``): each Kafka node and each ZooKeeper
  peer in a network namespace of its own (:func:`kafka_namespace`,
  :func:`zookeeper_namespace`, ``netns.py``), listening (and a broker advertising) on its
  namespace's address for clients and the other members alike, so ``netns.split`` cuts a
  broker off from the other brokers, or a peer from the other peers, while every client in
  the root namespace still reaches it. The caller creates the namespaces first
  (``netns.hosts(topology_namespaces())``). Kafka runs KRaft, so the brokers never talk
  to ZooKeeper: only httpbus's processes (in the root namespace) do.

Each node is a :class:`~.servers.Server` of its own, so a test kills, pauses and restarts
one with the :class:`~.supervisor.Supervisor` (``restart("kafka-2")``). Heaps are small:
the six JVMs take about 2.5 GB. Example::

    topology = cluster_topology(ClusterPorts.free())
    sup = Supervisor(run_dir, cache, topology=topology)
    sup.start(list(topology.servers), die_with_parent=True)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .netns import Namespace
from .ports import free_ports
from .pulsar_cluster import BOOKIES, BROKERS, PulsarPorts, pulsar_endpoints, pulsar_servers
from .servers import (
    HOST,
    Launch,
    Server,
    Topology,
    _four_letter,
    _java,
    _log4j,
    _props,
    _write,
    kafka_cluster_id,
    kafka_properties,
)

NODES = 3
KAFKA_NS_BASE = 230  # kafka-n's namespace index: clear of the partition tests' 1, 2, …
ZK_NS_BASE = 220  # zookeeper-n's (namespace ``httpbus-zk-n``, 10.234.22n.2)


def _ports(count: int) -> list[int]:
    """``count`` distinct ports free now, out of the ephemeral range (``ports``)."""
    return free_ports(count, HOST)


@dataclass(frozen=True)
class ClusterPorts:
    """Per node (index 0 is node 1): ZooKeeper's client, quorum and election ports; Kafka's
    broker and controller ports; and when behind proxies, the proxies' ports in front of
    each Kafka node, each controller and each ZooKeeper peer's client port (empty
    otherwise)."""

    zookeeper: tuple[int, ...] = (2281, 2282, 2283)
    zk_quorum: tuple[int, ...] = (2888, 2889, 2890)
    zk_election: tuple[int, ...] = (3888, 3889, 3890)
    kafka: tuple[int, ...] = (9192, 9193, 9194)
    kafka_controller: tuple[int, ...] = (9195, 9196, 9197)
    pulsar: PulsarPorts = PulsarPorts((3281, 3282, 3283), (6750, 6751), (8180, 8181))
    kafka_proxies: tuple[int, ...] = ()
    zookeeper_proxies: tuple[int, ...] = ()
    controller_proxies: tuple[int, ...] = ()

    @classmethod
    def free(cls, proxies: bool = False) -> ClusterPorts:
        """Ports free now (a test's own cluster beside the suite's servers); with
        ``proxies``, one more for a proxy in front of each Kafka node, controller and
        ZooKeeper peer, all drawn at once so no two are the same."""
        extra = 3 * NODES if proxies else 0
        free = iter(_ports(5 * NODES + BOOKIES + 2 * BROKERS + extra))
        zk, quorum, election, kafka, ctrl = (_take(free, NODES) for _ in range(5))
        pulsar = PulsarPorts(_take(free, BOOKIES), _take(free, BROKERS), _take(free, BROKERS))
        kafka_px, zk_px, ctrl_px = (_take(free, extra // 3) for _ in range(3))
        return cls(zk, quorum, election, kafka, ctrl, pulsar, kafka_px, zk_px, ctrl_px)

    def proxied(self) -> dict[str, tuple[str, str]]:
        """Each proxy by name (``kafka-1``, ``controller-1``, ``zookeeper-1``, …): where it
        listens, and the node's port it forwards to."""
        kinds = {
            "kafka": zip(self.kafka_proxies, self.kafka, strict=False),
            "controller": zip(self.controller_proxies, self.kafka_controller, strict=False),
            "zookeeper": zip(self.zookeeper_proxies, self.zookeeper, strict=False),
        }
        return {
            f"{kind}-{n}": (f"{HOST}:{port}", f"{HOST}:{upstream}")
            for kind, pairs in kinds.items()
            for n, (port, upstream) in enumerate(pairs, 1)
        }


def _take(ports: Iterator[int], count: int) -> tuple[int, ...]:
    return tuple(next(ports) for _ in range(count))


def zookeeper_peer(
    node: int,
    ports: ClusterPorts,
    heap: str = "128m",
    namespaces: bool = False,
    txn_logs: Path | None = None,
) -> Server:
    """Peer ``node`` (1-based) of the ensemble, with a Java heap of at most ``heap``; with
    ``namespaces``, run in :func:`zookeeper_namespace` and listening on its address (client,
    quorum and election ports alike); with ``txn_logs``, its transaction log in a directory of
    its own there (ZooKeeper's ``dataLogDir``: a device of its own in a real ensemble)."""
    client = ports.zookeeper[node - 1]
    hosts = zookeeper_hosts(namespaces)

    def prepare(data: Path, cp: str) -> Launch:
        _write(data / "data" / "myid", f"{node}\n")
        peers = {
            f"server.{i}": f"{hosts[i - 1]}:{ports.zk_quorum[i - 1]}:{ports.zk_election[i - 1]}"
            for i in range(1, NODES + 1)
        }
        settings = {
            "tickTime": 1000,  # sessions of 2-20 s: the tests' 4 s sessions fit
            "initLimit": 10,
            "syncLimit": 5,
            "dataDir": data / "data",
            **({"dataLogDir": txn_logs / f"zookeeper-{node}"} if txn_logs else {}),
            "clientPort": client,
            "clientPortAddress": hosts[node - 1],
            "admin.enableServer": "false",
            "4lw.commands.whitelist": "ruok,srvr,stat,mntr,wchs",
            "maxClientCnxns": 0,
            **peers,
        }
        cfg = _write(data / "zoo.cfg", _props(settings))
        main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
        flags = ["-Dzookeeper.jmx.log4j.disable=true"]
        argv = _java(cp, [f"-Xmx{heap}"], flags, main, [str(cfg)])
        return Launch(zookeeper_namespace(node).exec_argv(argv) if namespaces else argv)

    def ready() -> bool:
        answer = _four_letter(client, b"srvr", hosts[node - 1])
        return b"Mode: leader" in answer or b"Mode: follower" in answer

    return Server(f"zookeeper-{node}", prepare, ready, start_timeout=90, pom="zookeeper")


def zookeeper_mode(port: int, host: str = HOST) -> str:
    """``leader``, ``follower`` or "" (down, or not serving) for the peer on ``host:port``."""
    for line in _four_letter(port, b"srvr", host).decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return ""


def zookeeper_namespace(node: int) -> Namespace:
    """The network namespace ZooKeeper peer ``node`` runs in, in the ``namespaces`` topology."""
    return Namespace(f"zk-{node}", ZK_NS_BASE + node)


def zookeeper_hosts(namespaces: bool) -> tuple[str, ...]:
    """Where each ZooKeeper peer listens: 127.0.0.1, or its namespace's address."""
    nodes = range(1, NODES + 1)
    return tuple(zookeeper_namespace(n).address if namespaces else HOST for n in nodes)


def kafka_namespace(node: int) -> Namespace:
    """The network namespace Kafka node ``node`` runs in, in the ``namespaces`` topology."""
    return Namespace(f"kafka-{node}", KAFKA_NS_BASE + node)


def kafka_hosts(namespaces: bool) -> tuple[str, ...]:
    """Where each Kafka node listens: 127.0.0.1, or its namespace's address."""
    nodes = range(1, NODES + 1)
    return tuple(kafka_namespace(n).address if namespaces else HOST for n in nodes)


def kafka_node(node: int, ports: ClusterPorts, cluster_id: str, namespaces: bool = False) -> Server:
    """Node ``node`` (1-based): a broker and a voter of the static controller quorum; with
    ``namespaces``, run in :func:`kafka_namespace` and listening on its address."""
    hosts = kafka_hosts(namespaces)
    plain = f"{hosts[node - 1]}:{ports.kafka[node - 1]}"
    advertised = f"{HOST}:{ports.kafka_proxies[node - 1]}" if ports.kafka_proxies else ""
    ctrl = f"{hosts[node - 1]}:{ports.kafka_controller[node - 1]}"
    voter_ports = ports.controller_proxies or ports.kafka_controller
    voters = ",".join(
        f"{i}@{host}:{port}"
        for i, (host, port) in enumerate(zip(hosts, voter_ports, strict=True), 1)
    )

    def prepare(data: Path, cp: str) -> Launch:
        quorum = {"controller.quorum.voters": voters}
        settings = kafka_properties(
            node, data, plain, ctrl, quorum, replicas=NODES, min_isr=2, advertised=advertised
        )
        props = _write(data / "server.properties", _props(settings))
        heap = ["-Xms256m", "-Xmx512m"]
        flags = [f"-Dlog4j2.configurationFile={_log4j(data)}"]
        args = ["format", "-t", cluster_id, "-c", str(props)]
        fmt = _java(cp, heap, flags, "kafka.tools.StorageTool", args)
        argv = _java(cp, heap, flags, "kafka.Kafka", [str(props)])
        return Launch(kafka_namespace(node).exec_argv(argv) if namespaces else argv, pre=[fmt])

    def ready() -> bool:
        return _brokers(plain) == NODES

    return Server(f"kafka-{node}", prepare, ready, start_timeout=120, pom="kafka")


def _brokers(bootstrap: str) -> int:
    from confluent_kafka.admin import AdminClient  # the venv has it; the JVMs do not need it

    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=2)
    except Exception:  # any client error means "not yet"
        return 0
    return len(meta.brokers)


def cluster_topology(
    ports: ClusterPorts | None = None,
    zk_heap: str = "128m",
    *,
    pulsar: bool = False,
    namespaces: bool = False,
    zk_txn_logs: Path | None = None,
) -> Topology:
    """The six servers and what clients connect to (every member, comma-separated);
    ``zk_heap``: each ZooKeeper peer's largest heap (bench/scale.py holds 10^5 units);
    ``pulsar``: with three bookies and two Pulsar brokers on the ensemble too
    (``pulsar_cluster.py``); ``namespaces``: each Kafka node and ZooKeeper peer in a network
    namespace of its own (:func:`topology_namespaces`, to be created by the caller first);
    ``zk_txn_logs``: where the peers' transaction logs go (:func:`zookeeper_peer`)."""
    ports = ports or ClusterPorts()
    if namespaces and (pulsar or ports.kafka_proxies):
        raise ValueError("Pulsar and proxies run on the loopback topology only")
    cluster_id = kafka_cluster_id()
    nodes = range(1, NODES + 1)
    servers = [zookeeper_peer(n, ports, zk_heap, namespaces, zk_txn_logs) for n in nodes] + [
        kafka_node(n, ports, cluster_id, namespaces) for n in nodes
    ]
    zk, kafka = zookeeper_hosts(namespaces), kafka_hosts(namespaces)
    zk_ports = ports.zookeeper_proxies or ports.zookeeper
    kafka_ports = ports.kafka_proxies or ports.kafka
    endpoints = {
        "zookeeper": ",".join(f"{h}:{p}" for h, p in zip(zk, zk_ports, strict=True)),
        "kafka": ",".join(f"{h}:{p}" for h, p in zip(kafka, kafka_ports, strict=True)),
    }
    if pulsar:
        servers += pulsar_servers(endpoints["zookeeper"], ports.pulsar)
        endpoints |= pulsar_endpoints(ports.pulsar)
    return Topology({s.name: s for s in servers}, endpoints)


def kafka_namespaces() -> list[Namespace]:
    """The namespaces of ``cluster_topology(namespaces=True)``'s Kafka nodes, node 1 first."""
    return [kafka_namespace(n) for n in range(1, NODES + 1)]


def zookeeper_namespaces() -> list[Namespace]:
    """The namespaces of ``cluster_topology(namespaces=True)``'s ZooKeeper peers, peer 1
    first."""
    return [zookeeper_namespace(n) for n in range(1, NODES + 1)]


def topology_namespaces() -> list[Namespace]:
    """Every namespace of ``cluster_topology(namespaces=True)``: the Kafka nodes', then the
    ZooKeeper peers' (not created: ``with netns.hosts(topology_namespaces()): ...``)."""
    return kafka_namespaces() + zookeeper_namespaces()

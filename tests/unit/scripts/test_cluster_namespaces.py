"""The cluster topology with each Kafka node and ZooKeeper peer in a network namespace
(scripts/realservices/cluster.py) and the namespace helper's address partition (netns.py),
as configuration and ``ip`` commands: no root, nothing started."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from scripts.realservices import netns
from scripts.realservices.cluster import (
    ClusterPorts,
    cluster_topology,
    topology_namespaces,
    zookeeper_namespaces,
)

PORTS = ClusterPorts(kafka=(9001, 9002, 9003), kafka_controller=(9101, 9102, 9103))


def _properties(
    tmp_path: Path, name: str, namespaces: bool, ports: ClusterPorts = PORTS
) -> tuple[dict[str, str], list[str]]:
    server = cluster_topology(ports, namespaces=namespaces).servers[name]
    launch = server.prepare(tmp_path, "cp")
    lines = (tmp_path / "server.properties").read_text().splitlines()
    props = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    return props, launch.argv


def test_each_kafka_node_listens_and_advertises_on_its_namespace_address(tmp_path: Path) -> None:
    props, argv = _properties(tmp_path, "kafka-2", namespaces=True)
    mine = "10.234.232.2"
    assert props["listeners"] == f"PLAINTEXT://{mine}:9002,CONTROLLER://{mine}:9102"
    assert props["advertised.listeners"] == props["listeners"]
    assert props["controller.quorum.voters"] == (
        "1@10.234.231.2:9101,2@10.234.232.2:9102,3@10.234.233.2:9103"
    )
    assert argv[:4] == ["ip", "netns", "exec", "httpbus-kafka-2"]


def test_each_zookeeper_peer_listens_on_its_namespace_address(tmp_path: Path) -> None:
    server = cluster_topology(PORTS, namespaces=True).servers["zookeeper-3"]
    launch = server.prepare(tmp_path, "cp")
    lines = (tmp_path / "zoo.cfg").read_text().splitlines()
    cfg = dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))
    assert cfg["clientPortAddress"] == "10.234.223.2"
    assert [cfg[f"server.{n}"] for n in (1, 2, 3)] == [
        f"10.234.22{n}.2:{PORTS.zk_quorum[n - 1]}:{PORTS.zk_election[n - 1]}" for n in (1, 2, 3)
    ]
    assert launch.argv[:4] == ["ip", "netns", "exec", "httpbus-zk-3"]


def test_clients_are_handed_every_namespace_address() -> None:
    endpoints = cluster_topology(PORTS, namespaces=True).endpoints
    assert endpoints["kafka"] == "10.234.231.2:9001,10.234.232.2:9002,10.234.233.2:9003"
    assert endpoints["zookeeper"] == "10.234.221.2:2281,10.234.222.2:2282,10.234.223.2:2283"
    assert [ns.name for ns in topology_namespaces()] == [
        "httpbus-kafka-1",
        "httpbus-kafka-2",
        "httpbus-kafka-3",
        "httpbus-zk-1",
        "httpbus-zk-2",
        "httpbus-zk-3",
    ]
    indexes = [ns.index for ns in topology_namespaces()]
    assert len(set(indexes)) == len(indexes)


def test_the_loopback_topology_stays_the_default(tmp_path: Path) -> None:
    props, argv = _properties(tmp_path, "kafka-1", namespaces=False)
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9001,CONTROLLER://127.0.0.1:9101"
    assert argv[0] != "ip"
    assert cluster_topology(PORTS).endpoints["kafka"].split(",")[0] == "127.0.0.1:9001"
    assert cluster_topology(PORTS).endpoints["zookeeper"].split(",")[0] == "127.0.0.1:2281"
    zk_argv = cluster_topology(PORTS).servers["zookeeper-1"].prepare(tmp_path, "cp").argv
    assert zk_argv[0] != "ip"


def test_pulsar_is_not_offered_in_namespaces() -> None:
    with pytest.raises(ValueError, match="loopback"):
        cluster_topology(PORTS, pulsar=True, namespaces=True)


def test_free_ports_are_all_distinct() -> None:
    for _ in range(20):
        ports = ClusterPorts.free()
        every = [*ports.zookeeper, *ports.zk_quorum, *ports.zk_election, *ports.kafka]
        every += [*ports.kafka_controller, *ports.pulsar.bookie, *ports.pulsar.broker]
        every += [*ports.pulsar.web]
        assert len(set(every)) == len(every)


def test_behind_proxies_clients_brokers_and_voters_reach_each_node_through_its_proxy(
    tmp_path: Path,
) -> None:
    ports = ClusterPorts.free(proxies=True)
    every = [*ports.kafka, *ports.kafka_controller, *ports.zookeeper, *ports.kafka_proxies]
    every += [*ports.controller_proxies, *ports.zookeeper_proxies]
    assert len(set(every)) == len(every) == 18
    props, _ = _properties(tmp_path, "kafka-2", namespaces=False, ports=ports)
    own, ctrl = ports.kafka[1], ports.kafka_controller[1]
    assert props["listeners"] == f"PLAINTEXT://127.0.0.1:{own},CONTROLLER://127.0.0.1:{ctrl}"
    assert props["advertised.listeners"].startswith(
        f"PLAINTEXT://127.0.0.1:{ports.kafka_proxies[1]}"
    )
    voters = [f"{n}@127.0.0.1:{port}" for n, port in enumerate(ports.controller_proxies, 1)]
    assert props["controller.quorum.voters"] == ",".join(voters)
    proxied = ports.proxied()
    assert proxied["controller-3"] == (
        f"127.0.0.1:{ports.controller_proxies[2]}",
        f"127.0.0.1:{ports.kafka_controller[2]}",
    )
    assert sorted(proxied) == sorted(
        f"{kind}-{n}" for kind in ("kafka", "controller", "zookeeper") for n in (1, 2, 3)
    )


def test_split_isolates_one_node_from_the_others_both_ways_by_address() -> None:
    one, two, three = topology_namespaces()[:3]
    with mock.patch.object(netns, "ip", return_value="") as ip:
        netns.split(one, [two, three])
    rules = [(c.kwargs["netns"], c.args) for c in ip.call_args_list]
    table = one.table

    def rule(to: str, t: str) -> tuple[str, ...]:
        return ("rule", "add", "pref", "100", "to", f"{to}/32", "lookup", t)

    assert rules == [
        ("httpbus-kafka-1", rule("10.234.232.2", table)),
        ("httpbus-kafka-1", rule("10.234.233.2", table)),
        ("httpbus-kafka-2", rule("10.234.231.2", two.table)),
        ("httpbus-kafka-3", rule("10.234.231.2", three.table)),
    ]
    assert one.isolated == [two.address, three.address] and two.isolated == [one.address]


def test_split_isolates_a_zookeeper_peer_from_the_other_two() -> None:
    one, two, three = zookeeper_namespaces()
    with mock.patch.object(netns, "ip", return_value=""):
        netns.split(two, [one, three])
    assert two.isolated == ["10.234.221.2", "10.234.223.2"]
    assert one.isolated == three.isolated == ["10.234.222.2"]

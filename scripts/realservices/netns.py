"""Network namespaces for the chaos tests (issue 34): a node in a namespace of its own, so a
partition drops real packets between it and the servers instead of killing or pausing a
process.

Each :class:`Namespace` ``httpbus-<tag>`` is joined to the root namespace by a veth pair on
a /24 of its own, ``10.234.<index>.0/24``: the root end is ``.1``, the namespace's end
``.2``. The servers keep listening on 127.0.0.1 in the root namespace, and a process in the
namespace still reaches them at 127.0.0.1 over the veth: the namespace's loopback stays
down (so 127.0.0.1 is not local there), a route sends 127.0.0.1 to the root end, and both
ends accept loopback addresses on the wire (``route_localnet``). So every address a server
hands out (Kafka's advertised listeners, an endpoint's URL) works unchanged from inside,
with no forwarder and nothing restarted; a server in the namespace listens on ``.2``.

A server node (:meth:`Namespace.host`, e.g. a Kafka broker of ``cluster.py``'s
``namespaces`` topology) differs in two ways: its loopback is up, so it reaches its own
address (with the loopback down, a connection to it goes nowhere; 127.0.0.1 becomes its
own then, not the root namespace's), and the other namespaces (``10.234.0.0/16``) are
reached through the root end, with IPv4 forwarding on in the root namespace, so nodes in
namespaces talk to each other through it while the root namespace's clients reach each of
them directly. :meth:`Namespace.isolate` then drops what it sends to given addresses, and
:func:`split` partitions one node from others both ways, each still reaching the clients.

A partition sends the chosen packets into a void: a policy rule (``ip rule``, by TCP port)
routes them to a neighbour ``.254`` with a made-up MAC address, which the other end of the
veth drops on receipt, as a cut link would. Nobody gets an error: connections go silent
and new ones time out. ``direction`` makes it asymmetric: ``out`` drops what the namespace
sends to those ports, ``in`` what the servers on those ports send back, ``both`` both.
:meth:`Namespace.cut` takes the whole link down instead.

Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN: ``ip netns add``, veth links,
rules and routes in the root namespace, ``ip netns exec``). This machine has ``ip``
(iproute2) and no iptables, nft or tc netem, hence policy rules. Namespaces, links, rules
and tables are named by :data:`PREFIX` and a small index, so :func:`clean` removes what a
failed run left behind. Example::

    clean()
    with namespace("w1", 1) as ns:
        proc = subprocess.Popen(ns.exec_argv([sys.executable, "-m", "delivery_workers", ...]))
        ns.partition([2181])  # cut off from ZooKeeper, not from Kafka or the endpoint
        ...
        ns.heal()

    split(kafka_1, [kafka_2, kafka_3])  # server nodes: 1 and {2, 3} no longer talk
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

PREFIX = "httpbus-"
SUBNET = "10.234"
SPACE = f"{SUBNET}.0.0/16"  # every namespace's link
VOID_MAC = "02:00:5e:00:de:ad"  # locally administered: no interface has it
TABLE_BASE = 23400  # routing table (and root rule priority) of namespace i: TABLE_BASE + i
MAX_INDEX = 250
FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")  # the root namespace's, while hosting
Direction = Literal["out", "in", "both"]


def ip(*args: str, netns: str | None = None, check: bool = True) -> str:
    """Run ``ip args`` (in namespace ``netns`` when given); its output."""
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _sysctl(key: str, value: str, netns: str | None = None) -> None:
    argv = ["sysctl", "-q", "-w", f"{key}={value}"]
    if netns:
        argv = ["ip", "netns", "exec", netns, *argv]
    subprocess.run(argv, check=True, capture_output=True)


@dataclass
class Namespace:
    tag: str
    index: int  # 1..MAX_INDEX: the subnet, the links' and the table's number
    partitioned: list[tuple[int, Direction]] = field(default_factory=list)
    isolated: list[str] = field(default_factory=list)  # addresses it no longer reaches
    hosting: bool = False  # a server node's (:meth:`host`)

    @property
    def name(self) -> str:
        return f"{PREFIX}{self.tag}"

    @property
    def address(self) -> str:
        """The namespace's own address (a server in it listens there)."""
        return f"{SUBNET}.{self.index}.2"

    @property
    def gateway(self) -> str:
        """The root namespace's end of the link."""
        return f"{SUBNET}.{self.index}.1"

    @property
    def void(self) -> str:
        return f"{SUBNET}.{self.index}.254"

    @property
    def root_link(self) -> str:
        return f"hbns{self.index}r"

    @property
    def ns_link(self) -> str:
        return f"hbns{self.index}n"

    @property
    def table(self) -> str:
        return str(TABLE_BASE + self.index)

    def exec_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run inside the namespace (``ip netns exec`` keeps the pid: it execs)."""
        return ["ip", "netns", "exec", self.name, *argv]

    def create(self) -> None:
        if not 1 <= self.index <= MAX_INDEX:
            raise ValueError(f"index {self.index}: pick 1..{MAX_INDEX}")
        ip("netns", "add", self.name)
        ip("link", "add", self.root_link, "type", "veth", "peer", "name", self.ns_link)
        ip("link", "set", self.ns_link, "netns", self.name)
        ip("addr", "add", f"{self.gateway}/24", "dev", self.root_link)
        ip("addr", "add", f"{self.address}/24", "dev", self.ns_link, netns=self.name)
        _sysctl(f"net.ipv4.conf.{self.root_link}.route_localnet", "1")
        _sysctl(f"net.ipv4.conf.{self.ns_link}.route_localnet", "1", self.name)
        _sysctl(f"net.ipv4.conf.{self.ns_link}.rp_filter", "0", self.name)
        _sysctl("net.ipv4.conf.all.rp_filter", "0", self.name)
        ip("link", "set", self.root_link, "up")
        ip("link", "set", self.ns_link, "up", netns=self.name)
        self._routes()

    def _routes(self) -> None:
        """127.0.0.1 is the root namespace's, over the link (the namespace's lo stays down);
        the void is where partitioned packets go, on either side. Again after a link came
        back up: taking it down drops the routes and neighbours on it."""
        for link, netns in ((self.root_link, None), (self.ns_link, self.name)):
            neigh = ["neigh", "replace", self.void, "lladdr", VOID_MAC, "dev", link]
            ip(*neigh, "nud", "permanent", netns=netns)
        via = ["via", self.gateway, "dev", self.ns_link, "src", self.address]
        ip("route", "replace", "127.0.0.1/32", *via, netns=self.name)
        void = ["via", self.void, "dev", self.ns_link, "table", self.table]
        ip("route", "replace", "127.0.0.1/32", *void, netns=self.name)
        ip("route", "replace", f"{self.address}/32", "via", self.void, "dev", self.root_link,
           "table", self.table)  # fmt: skip

    def partition(self, ports: Iterable[int], direction: Direction = "both") -> None:
        """Drop the TCP packets between the namespace and the root namespace's ``ports``:
        sent to them (``out``), sent from them (``in``), or both."""
        for port in ports:
            if direction in ("out", "both"):
                rule = ["ipproto", "tcp", "dport", str(port), "lookup", self.table]
                ip("rule", "add", "pref", "100", *rule, netns=self.name)
                self.partitioned.append((port, "out"))
            if direction in ("in", "both"):
                rule = ["to", self.address, "ipproto", "tcp", "sport", str(port)]
                ip("rule", "add", "pref", self.table, *rule, "lookup", self.table)
                self.partitioned.append((port, "in"))

    def host(self) -> None:
        """Make the namespace a server node's: loopback up (it reaches its own address),
        the other namespaces through the root end, and the root namespace forwarding
        between them (a machine-wide setting: :func:`hosts` puts it back as it was)."""
        ip("link", "set", "lo", "up", netns=self.name)
        via = ["via", self.gateway, "dev", self.ns_link, "src", self.address]
        ip("route", "replace", SPACE, *via, netns=self.name)
        void = ["via", self.void, "dev", self.ns_link, "table", self.table]
        ip("route", "replace", SPACE, *void, netns=self.name)  # where isolate() sends
        _sysctl("net.ipv4.ip_forward", "1")
        self.hosting = True

    def isolate(self, addresses: Iterable[str]) -> None:
        """Drop every packet the namespace sends to ``addresses`` (other namespaces'): a
        connection to them goes silent, a new one times out. One way only: :func:`split`
        does both."""
        for address in addresses:
            rule = ["to", f"{address}/32", "lookup", self.table]
            ip("rule", "add", "pref", "100", *rule, netns=self.name)
            self.isolated.append(address)

    def heal(self) -> None:
        """Every partition undone (the link brought back up too)."""
        _delete_rules(self.table, None)
        _delete_rules("100", self.name)
        self.partitioned.clear()
        self.isolated.clear()
        ip("link", "set", self.root_link, "up")
        self._routes()
        if self.hosting:
            self.host()  # the link's routes went with it if it was cut

    def cut(self) -> None:
        """The whole link down: nothing passes either way until :meth:`heal`."""
        ip("link", "set", self.root_link, "down")

    def destroy(self) -> None:
        """The namespace, its link (both ends go with it) and its rules in the root namespace."""
        _delete_rules(self.table, None)
        ip("netns", "del", self.name, check=False)
        ip("link", "del", self.root_link, check=False)


def split(one: Namespace, others: Iterable[Namespace]) -> None:
    """Partition server node ``one`` from ``others`` both ways: neither side's packets
    reach the other; each still reaches, and is reached by, the root namespace's clients.
    :meth:`Namespace.heal` on each undoes it."""
    others = list(others)
    one.isolate(o.address for o in others)
    for other in others:
        other.isolate([one.address])


@contextmanager
def hosts(spaces: Iterable[Namespace]) -> Iterator[list[Namespace]]:
    """``spaces`` created as server nodes' (:meth:`Namespace.host`), and destroyed on the
    way out whatever happened (leftovers of the same names removed first)."""
    made = list(spaces)
    forwarding = FORWARDING.read_text().strip() if FORWARDING.exists() else "0"
    try:
        for ns in made:
            ns.destroy()
            ns.create()
            ns.host()
        yield made
    finally:
        for ns in made:
            ns.destroy()
        _sysctl("net.ipv4.ip_forward", forwarding)


def _delete_rules(pref: str, netns: str | None) -> None:
    """Every rule of priority ``pref``."""
    while f"{pref}:" in ip("rule", "show", "pref", pref, netns=netns, check=False):
        ip("rule", "del", "pref", pref, netns=netns)


@contextmanager
def namespace(tag: str, index: int) -> Iterator[Namespace]:
    """A created :class:`Namespace`, destroyed on the way out whatever happened (a leftover
    of the same name is removed first)."""
    ns = Namespace(tag, index)
    ns.destroy()
    try:
        ns.create()
        yield ns
    finally:
        ns.destroy()


def clean() -> list[str]:
    """Remove every namespace named with :data:`PREFIX`, and the links and root rules of
    this module's indexes: what a failed run left behind. The names removed."""
    names = [
        line.split()[0]
        for line in ip("netns", "list", check=False).splitlines()
        if line.startswith(PREFIX)
    ]
    for name in names:
        ip("netns", "del", name, check=False)
    ours = range(TABLE_BASE + 1, TABLE_BASE + MAX_INDEX + 1)
    prefs = {line.split(":")[0] for line in ip("rule", "show", check=False).splitlines()}
    for pref in sorted(p for p in prefs if p.isdigit() and int(p) in ours):
        _delete_rules(pref, None)
    for line in ip("-o", "link", "show", check=False).splitlines():
        link = line.split(":")[1].strip().split("@")[0]
        if link.startswith("hbns") and link.endswith("r"):
            ip("link", "del", link, check=False)
    return names

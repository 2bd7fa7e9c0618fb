"""The network namespace helper (scripts/realservices/netns.py) against the suite's real
ZooKeeper and Kafka: from inside a namespace both answer at 127.0.0.1; a partition by port
drops one and not the other, both ways and each way alone, silently (a connection attempt
times out, an open connection goes quiet); a cut link drops everything; a heal brings it all
back; and what a failed run left behind is cleaned. Needs root."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

from scripts.realservices import netns
from scripts.realservices.netns import Namespace
from tests.support.services import RealServices

# Run inside the namespace: connect to 127.0.0.1:<port> (2 s), optionally send a 4-letter
# word and read the answer (2 s); print "ok <answer>" or the error's class.
PROBE = """
import socket, sys
try:
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2)
    if len(sys.argv) > 2:
        s.sendall(sys.argv[2].encode()); s.settimeout(2)
        print("ok", s.recv(100).decode()[:4])
    else:
        print("ok")
except OSError as e:
    print(type(e).__name__)
"""

# Run inside the namespace: connect, say so, and on a line of input send "ruok" and wait 2 s
# for the answer.
HELD = """
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), 2)
print("connected", flush=True)
input()
s.sendall(b"ruok"); s.settimeout(2)
try:
    print("ok", s.recv(100).decode())
except OSError as e:
    print(type(e).__name__)
"""


def _probe(ns: Namespace, port: int, word: str = "") -> str:
    argv = ns.exec_argv([sys.executable, "-c", PROBE, str(port), *([word] if word else [])])
    return subprocess.run(argv, capture_output=True, text=True, timeout=30).stdout.strip()


def _ports(real: RealServices) -> tuple[int, int]:
    return int(real.zookeeper.rsplit(":", 1)[1]), int(real.kafka.rsplit(":", 1)[1])


def test_a_partition_by_port_drops_that_server_only_and_heals(
    real_services: RealServices, namespaces: Callable[[str], Namespace]
) -> None:
    ns = namespaces("probe")
    zk, kafka = _ports(real_services)
    assert (_probe(ns, zk, "ruok"), _probe(ns, kafka)) == ("ok imok", "ok")
    for direction in ("both", "out", "in"):
        ns.partition([zk], direction)  # type: ignore[arg-type]
        assert (_probe(ns, zk), _probe(ns, kafka)) == ("TimeoutError", "ok"), direction
        ns.heal()
        assert _probe(ns, zk, "ruok") == "ok imok", f"not healed after {direction}"


def test_an_open_connection_goes_silent_and_a_cut_link_drops_everything(
    real_services: RealServices, namespaces: Callable[[str], Namespace]
) -> None:
    ns = namespaces("quiet")
    zk, kafka = _ports(real_services)
    # A connection opened before the partition, written to after it: no answer, no error.
    argv = ns.exec_argv([sys.executable, "-c", HELD, str(zk)])
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline().strip() == "connected"
        ns.partition([zk])
        assert proc.communicate("\n", timeout=30)[0].strip() == "TimeoutError"
    ns.heal()
    ns.cut()
    assert (_probe(ns, zk), _probe(ns, kafka)) == ("TimeoutError", "TimeoutError")
    ns.heal()
    assert (_probe(ns, zk, "ruok"), _probe(ns, kafka)) == ("ok imok", "ok")
    ns.partition([kafka])  # the void's routes are back after the link was down
    assert (_probe(ns, zk), _probe(ns, kafka)) == ("ok", "TimeoutError")


def test_clean_removes_what_a_failed_run_left_behind() -> None:
    left = Namespace("left-behind", 42)
    left.create()
    left.partition([1], "in")  # a rule in the root namespace too
    assert "httpbus-left-behind" in netns.clean()
    assert "httpbus-left-behind" not in netns.ip("netns", "list")
    assert "hbns42r" not in netns.ip("link", "show")
    assert str(netns.TABLE_BASE + 42) not in netns.ip("rule", "show")

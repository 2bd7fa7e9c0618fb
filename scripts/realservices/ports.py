"""Ports for servers started later: picked below the kernel's ephemeral range.

A port the kernel gives ``bind(0)`` lies in its ephemeral range (``ip_local_port_range``,
32768-60999 here), which every outgoing connection draws from too: between the pick and the
server's own bind, any client's connection (a Kafka, ZooKeeper or HTTP client of any process)
can take it. A clean-clone CI run lost a chaos test that way: a producer exited with "address
already in use" on a port picked some 30 s before it started. So ports are drawn at random
from ``LOW`` up to the start of that range, each checked free by a bind and held until all
are drawn; only another picker can draw the same one, at about a thousandth of a chance for
ten ports each.
"""

from __future__ import annotations

import random
import socket
from contextlib import ExitStack
from pathlib import Path

LOW = 20_000
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now, none an outgoing connection may take."""
    high = max(_ephemeral_low(), LOW + 1_000)
    picked: list[int] = []
    with ExitStack() as held:
        while len(picked) < count:
            port = random.randrange(LOW, high)
            if port in picked:
                continue
            sock = held.enter_context(socket.socket())
            try:
                sock.bind((host, port))
            except OSError:
                continue  # in use (or in TIME_WAIT): draw another
            picked.append(port)
    return picked


def free_port(host: str = "127.0.0.1") -> int:
    """One port as :func:`free_ports` gives them."""
    return free_ports(1, host)[0]

"""Ports for servers started later: picked below the kernel's ephemeral range.

A port the kernel gives ``bind(0)`` lies in its ephemeral range (``ip_local_port_range``,
32768-60999 here), which every outgoing connection draws from too: between the pick and the
server's own bind, any client's connection (a Kafka, ZooKeeper or HTTP client of any process)
can take it. A clean-clone CI run lost a chaos test that way: a producer exited with "address
already in use" on a port picked some 30 s before it started. So ports are drawn at random
from ``LOW`` up to the start of that range, each checked free by a bind and held until all
are drawn. Only another picker can then draw the same one before its server binds it: a
later one of this process (a port it handed out is not handed out again while others are
left), or one of another process. A clean-clone CI run lost a chaos Pulsar broker so
("Address already in use"): the two lanes of ``make test`` drew from the one range. So
each pytest-xdist worker (``PYTEST_XDIST_WORKER`` = ``gw<i>`` of
``PYTEST_XDIST_WORKER_COUNT``, inherited by the processes it starts) draws from a slice of
its own; any other process from the whole range.
"""

from __future__ import annotations

import os
import random
import socket
from contextlib import ExitStack
from pathlib import Path

LOW = 20_000
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed: set[int] = set()  # every port this process gave out


def _ephemeral_low() -> int:
    try:
        return int(RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768  # Linux's default


def span(worker: str | None, workers: str | None, ephemeral_low: int) -> range:
    """The ports a picker may draw: the xdist worker's slice of ``LOW`` up to the
    ephemeral range, or all of it outside a worker."""
    whole = range(LOW, max(ephemeral_low, LOW + 1_000))
    if not worker or not workers or not worker.startswith("gw"):
        return whole
    lane, lanes = int(worker.removeprefix("gw")), max(int(workers), 1)
    width = len(whole) // lanes
    return range(whole.start + lane * width, whole.start + (lane + 1) * width)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports free on ``host`` now, none an outgoing connection may take,
    none this process gave out before (while its slice has others), none another lane's."""
    ports = span(
        os.environ.get("PYTEST_XDIST_WORKER"),
        os.environ.get("PYTEST_XDIST_WORKER_COUNT"),
        _ephemeral_low(),
    )
    if len(_handed) > len(ports) // 2:
        _handed.clear()  # a long life: old ports are long bound or long free
    picked: list[int] = []
    with ExitStack() as held:
        while len(picked) < count:
            port = random.choice(ports)
            if port in picked or port in _handed:
                continue
            sock = held.enter_context(socket.socket())
            try:
                sock.bind((host, port))
            except OSError:
                continue  # in use (or in TIME_WAIT): draw another
            picked.append(port)
    _handed.update(picked)
    return picked


def free_port(host: str = "127.0.0.1") -> int:
    """One port as :func:`free_ports` gives them."""
    return free_ports(1, host)[0]

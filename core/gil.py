"""How soon a thread waiting for the GIL gets it in a service process (:func:`tune`).

A service's event loop shares the interpreter with its clients' threads: kazoo's connection
and completion threads (every ZooKeeper request and answer), pulsar-client's callbacks. Each
time such a thread makes a system call it lets go of the GIL, and while the loop is busy it
gets it back only when the loop is made to yield, after the switch interval: 5 ms by
default. A thread that makes a few system calls per answer then carries a few hundred
answers a second however fast the server is. ``bench/zk_client.py`` (kazoo reads, 250 in
flight, beside a thread that keeps the GIL busy): 40 answers a second at 5 ms, 304 at 1 ms;
with :mod:`metastore.zk_handler`'s one-call wait 98 and 552. A busy loop yields more often
in exchange: a switch costs microseconds, so 1 ms costs it well under 1 %."""

from __future__ import annotations

import sys

SWITCH_INTERVAL_S = 0.001
"""The longest a thread waits for the GIL held by a busy one (CPython's default: 5 ms)."""


def tune() -> None:
    """Set the switch interval. Call once, at the start of a service."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)

"""Ports for servers started later lie below the kernel's ephemeral range, which outgoing
connections draw from (a CI run lost a chaos test to one taken between pick and bind)."""

from __future__ import annotations

import socket

import pytest

from scripts.realservices import ports


def test_ports_are_distinct_free_and_out_of_the_ephemeral_range() -> None:
    picked = ports.free_ports(50)
    assert len(set(picked)) == 50
    assert all(ports.LOW <= p < ports._ephemeral_low() for p in picked)
    for port in picked[:5]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))  # free: nothing held it past the pick


def test_a_port_in_use_is_never_picked(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        free = ports.free_port()
        draws = iter([busy, busy, free])
        monkeypatch.setattr(ports.random, "randrange", lambda *_: next(draws))
        assert ports.free_port() == free

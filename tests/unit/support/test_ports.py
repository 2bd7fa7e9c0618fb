"""Ports for servers started later lie below the kernel's ephemeral range, which outgoing
connections draw from (a CI run lost a chaos test to one taken between pick and bind); each
xdist lane draws from a slice of its own, and a process never hands out one port twice
(a CI run lost a chaos Pulsar broker to a port the other lane drew too)."""

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


def test_a_port_in_use_or_handed_out_before_is_never_picked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        handed, free = ports.free_ports(2)
        ports._handed.discard(free)
        draws = iter([busy, busy, handed, free])
        monkeypatch.setattr(ports.random, "choice", lambda _: next(draws))
        assert ports.free_port() == free


def test_the_lanes_slices_are_disjoint_and_below_the_ephemeral_range() -> None:
    lanes = [ports.span(f"gw{i}", "2", 32_768) for i in range(2)]
    assert not set(lanes[0]) & set(lanes[1])
    assert lanes[0].start == ports.LOW and lanes[1].stop <= 32_768
    assert min(len(lane) for lane in lanes) > 6_000


def test_outside_a_lane_the_whole_range() -> None:
    assert ports.span(None, None, 32_768) == range(ports.LOW, 32_768)
    assert ports.span("master", "2", 32_768) == range(ports.LOW, 32_768)


def test_a_lane_draws_only_from_its_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw1")
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    mine = ports.span("gw1", "2", ports._ephemeral_low())
    assert all(port in mine for port in ports.free_ports(50))


def test_a_port_handed_out_is_not_handed_out_again() -> None:
    first = ports.free_ports(200)
    # Not bound by anyone, so a bind would find them free: only the memory keeps them out.
    assert not set(first) & set(ports.free_ports(200))

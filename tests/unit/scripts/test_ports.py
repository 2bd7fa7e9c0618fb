"""Ports for servers started later (scripts/realservices/ports.py): each xdist lane draws
from a slice of its own, and a process never hands out one port twice."""

from __future__ import annotations

import pytest

from scripts.realservices import ports


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

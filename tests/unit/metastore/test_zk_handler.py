"""kazoo's handler with a one-call wait answers as kazoo's own ``selector_select`` does."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kazoo.handlers.utils import selector_select

from metastore.zk_handler import PollHandler

Wait = Callable[..., tuple[list[Any], list[Any], list[Any]]]
WAITS: list[Wait] = [PollHandler().select, selector_select]


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


@pytest.mark.parametrize("wait", WAITS)
def test_a_socket_with_data_is_readable_and_a_quiet_one_times_out(
    wait: Wait, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    assert wait([a], [], [], 0.05) == ([], [], [])
    b.send(b"x")
    assert wait([a], [], [], 1.0) == ([a], [], [])


@pytest.mark.parametrize("wait", WAITS)
def test_a_socket_and_its_descriptor_are_both_answered(
    wait: Wait, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    b.send(b"x")
    readable, writable, _ = wait([a, a.fileno()], [b], [], 1.0)
    assert readable == [a, a.fileno()]
    assert writable == [b]


@pytest.mark.parametrize("wait", WAITS)
def test_a_closed_peer_wakes_a_reader(
    wait: Wait, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    b.close()
    readable, _, _ = wait([a], [], [], 1.0)
    assert readable == [a]
    assert a.recv(1) == b""


@pytest.mark.parametrize("wait", WAITS)
def test_a_socket_asked_for_both_is_answered_as_readable_only(
    wait: Wait, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, b = pair
    b.send(b"x")
    assert wait([a], [a], [], 1.0) == ([a, a], [], [])


def test_the_wait_lasts_its_timeout(pair: tuple[socket.socket, socket.socket]) -> None:
    a, _ = pair
    start = time.monotonic()
    PollHandler().select([a], [], [], 0.2)
    assert 0.19 <= time.monotonic() - start < 2.0


@pytest.mark.parametrize("wait", WAITS)
def test_a_negative_timeout_and_a_closed_socket_are_refused(
    wait: Wait, pair: tuple[socket.socket, socket.socket]
) -> None:
    a, _ = pair
    with pytest.raises(ValueError):
        wait([a], [], [], -1)
    a.close()
    with pytest.raises(TypeError):
        wait([a], [], [], 0.01)

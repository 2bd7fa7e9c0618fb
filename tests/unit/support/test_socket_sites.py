"""An unclosed socket found by the garbage collector names where it was connected."""

from __future__ import annotations

import gc
import socket
import warnings

from tests.support import socket_sites


def _connect_and_drop(port: int) -> None:
    holder: dict[str, object] = {}
    sock = socket.socket()
    sock.connect(("127.0.0.1", port))
    holder["sock"], holder["self"] = sock, holder  # a cycle: only the collector frees it


def test_a_leaked_socket_names_the_function_that_connected_it() -> None:
    socket_sites.install()  # tests/conftest.py did already: a second call does nothing
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        with warnings.catch_warnings(record=True) as recorded:
            warnings.simplefilter("always", ResourceWarning)
            _connect_and_drop(listener.getsockname()[1])
            gc.collect()
    leaked = socket_sites.leaks(recorded)
    assert len(leaked) == 1, leaked
    assert "unclosed <socket.socket" in leaked[0]
    assert "_connect_and_drop" in leaked[0]

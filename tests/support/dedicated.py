"""A server of the test's own, for tests that need a *fresh* one or must stop or kill it:
the shared servers of the suite (``make services-up``) are never disturbed.

Example::

    with dedicated_kafka(tmp_path) as bootstrap:
        ...  # "127.0.0.1:<port>", a broker that started a moment ago
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from scripts.realservices.__main__ import DEFAULT_CACHE
from scripts.realservices.servers import Ports
from scripts.realservices.supervisor import Supervisor
from tests.support.processes import free_port


@contextmanager
def dedicated_kafka(run_dir: Path) -> Iterator[str]:
    """A single-node KRaft Kafka on free ports, data under ``run_dir``; stopped on exit."""
    ports = Ports(kafka=free_port(), kafka_controller=free_port())
    supervisor = Supervisor(run_dir, DEFAULT_CACHE, ports)
    supervisor.start(["kafka"], die_with_parent=True)
    try:
        yield f"127.0.0.1:{ports.kafka}"
    finally:
        supervisor.stop()

"""Serving a relay from its settings: logging, the relay, the exit (``python -m outbox_relay``
and ``httpbus outbox run``)."""

from __future__ import annotations

import logging
import os
import sys

from .relay import Relay
from .settings import RelaySettings


def serve(settings: RelaySettings) -> None:
    """Runs the relay until SIGTERM or SIGINT (exit 0) or a failure (exit 1); never returns."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per POST: its own figures
    code = Relay(settings).run()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # The engine has stopped and flushed its offsets; JPype's exit would wait for the JVM's
    # remaining non-daemon threads (Kafka Connect's), which a stopped engine may leave behind.
    os._exit(code)

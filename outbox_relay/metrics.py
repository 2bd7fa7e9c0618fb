"""What the relay counts, served as Prometheus text when ``metrics_port`` is set
(docs/metrics.md, "Outbox relay"). Counts start at zero with each process: its log's batch
lines are the record across restarts."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class RelayMetrics:
    """The relay's counters, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.events = Counter(
            "httpbus_outbox_events",
            "outbox events by outcome: stored, duplicate (a replay), skipped (no event)",
            ["outcome"],
            registry=self.registry,
        )
        self.retries = Counter(
            "httpbus_outbox_retries",
            "POSTs tried again: httpbus throttled, unavailable or unreachable",
            registry=self.registry,
        )
        self.batches = Counter(
            "httpbus_outbox_batches",
            "Debezium batches acknowledged (every event taken by httpbus)",
            registry=self.registry,
        )
        self.last_batch = Gauge(
            "httpbus_outbox_last_batch_timestamp_seconds",
            "when the last batch was acknowledged (Unix time)",
            registry=self.registry,
        )
        for outcome in ("stored", "duplicate", "skipped"):
            self.events.labels(outcome)

    def acknowledged(self, stored: int, duplicates: int, skipped: int) -> None:
        self.events.labels("stored").inc(stored)
        self.events.labels("duplicate").inc(duplicates)
        self.events.labels("skipped").inc(skipped)
        self.batches.inc()
        self.last_batch.set(time.time())

    def serve(self, host: str, port: int) -> None:
        """Serves ``/metrics`` on ``host:port`` from a daemon thread."""
        start_http_server(port, addr=host, registry=self.registry)

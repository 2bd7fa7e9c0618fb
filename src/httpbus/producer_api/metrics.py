"""Prometheus metrics of the producer service (one registry per app)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProducerMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "httpbus_produce_requests",
            "produce requests by outcome",
            ["project", "topic", "code"],
            registry=self.registry,
        )
        self.messages = Counter(
            "httpbus_produce_messages",
            "messages accepted",
            ["project", "topic"],
            registry=self.registry,
        )
        self.bytes = Counter(
            "httpbus_produce_bytes",
            "payload bytes accepted",
            ["project", "topic"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "httpbus_produce_latency_seconds",
            "accept latency (storage ack included)",
            buckets=BUCKETS,
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""Prometheus metrics of the producer service (one registry per app)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

OTHER = "_other"  # the label of every name that is not a topic the caller may see
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProducerMetrics:
    def __init__(self) -> None:
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
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
        self.duplicates = Counter(
            "httpbus_produce_duplicates",
            "publishes answered as duplicates (dedupe_window): nothing stored",
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

    def accepted(
        self, project: str, topic: str, size: int, latency_s: float, messages: int = 1
    ) -> None:
        """Count accepted messages (label children are cached: this is the hot path)."""
        key = (project, topic)
        children = self._children.get(key)
        if children is None:
            children = (
                self.requests.labels(project, topic, "accepted"),
                self.messages.labels(project, topic),
                self.bytes.labels(project, topic),
            )
            self._children[key] = children
        requests, messages_c, bytes_c = children
        requests.inc()
        messages_c.inc(messages)
        bytes_c.inc(size)
        self.latency.observe(latency_s)

    def duplicate(self, project: str, topic: str, count: int = 1) -> None:
        """Count publishes answered as duplicates (they count as accepted too)."""
        self.duplicates.labels(project, topic).inc(count)

    def refused(self, project: str, topic: str, code: str, *, seen: bool) -> None:
        """Count a refused request. Only a topic that exists and that the caller may publish
        to (``seen``) is named: anyone can send any names, and a label per name would let
        them grow this registry without bound; the rest is counted under :data:`OTHER`."""
        if not seen:
            project = topic = OTHER
        self.requests.labels(project, topic, code).inc()

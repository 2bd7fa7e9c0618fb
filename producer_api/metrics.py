"""Prometheus metrics of the producer service (one registry per app)."""

from __future__ import annotations

from typing import Any

from core.metrics import Metrics

OTHER = "_other"  # the label of every name that is not a topic the caller may see
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class ProducerMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self._children: dict[tuple[str, str], tuple[Any, Any, Any]] = {}
        topic = ["project", "topic"]
        self.requests = self.counter(
            "httpbus_produce_requests", "produce requests by outcome", [*topic, "code"]
        )
        self.messages = self.counter("httpbus_produce_messages", "messages accepted", topic)
        self.bytes = self.counter("httpbus_produce_bytes", "payload bytes accepted", topic)
        self.duplicates = self.counter(
            "httpbus_produce_duplicates",
            "publishes answered as duplicates (dedupe_window): nothing stored",
            topic,
        )
        self.latency = self.histogram(
            "httpbus_produce_latency_seconds", "accept latency (storage ack included)", BUCKETS
        )

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

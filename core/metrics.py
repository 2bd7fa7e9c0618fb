"""The base of a service's Prometheus metrics: one registry per app (so two apps in one
process, as in the tests, never share a series), its families declared on it, and its
exposition for ``/metrics``. Example::

    class ProducerMetrics(Metrics):
        def __init__(self) -> None:
            super().__init__()
            self.requests = self.counter("httpbus_produce_requests", "by outcome", ["code"])
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest


class Metrics:
    """See the module doc."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()

    def counter(self, name: str, documentation: str, labels: Sequence[str] = ()) -> Counter:
        return Counter(name, documentation, list(labels), registry=self.registry)

    def histogram(
        self,
        name: str,
        documentation: str,
        buckets: Sequence[float],
        labels: Sequence[str] = (),
    ) -> Histogram:
        return Histogram(name, documentation, list(labels), buckets=buckets, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""Prometheus metrics of the control plane: its API's requests and latency, who leads, and
the cutovers it drives. Route labels are the route templates (``/v1/projects/{project}``),
so callers cannot grow the label set; an unmatched path counts as ``_other``."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.metrics import Metrics

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Role(Protocol):
    """What ``/metrics`` reads of an elected role (``control_plane.leaders.election``)."""

    role: str
    is_leader: bool

    def figures(self) -> dict[str, Any]: ...


def roles_state(roles: Iterable[Role]) -> dict[str, Any]:
    """Who leads and the roles' own figures (cutovers driven, failovers started), as
    ``ControlPlaneMetrics.watch`` wants them."""
    leader: dict[str, bool] = {}
    active, failovers = 0, collections.Counter[tuple[str, str]]()
    for role in roles:
        leader[role.role] = role.is_leader
        figures = role.figures()
        active += figures.get("cutovers_active", 0)
        failovers.update(figures.get("failovers", {}))
    return {"leader": leader, "cutovers_active": active, "failovers": dict(failovers)}


class ControlPlaneMetrics(Metrics):
    def __init__(self) -> None:
        super().__init__()
        self.requests = self.counter(
            "httpbus_control_plane_requests",
            "API requests by route and status",
            ["method", "route", "status"],
        )
        self.latency = self.histogram(
            "httpbus_control_plane_request_latency_seconds",
            "API request latency by route",
            BUCKETS,
            ["method", "route"],
        )

    def watch(self, state: Callable[[], dict[str, Any]]) -> None:
        """Also report what ``state()`` says at scrape time (leaders, cutovers)."""
        self.registry.register(_StateCollector(state))


class _StateCollector(Collector):
    def __init__(self, state: Callable[[], dict[str, Any]]) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        found = self.state()
        leader = GaugeMetricFamily(
            "httpbus_control_plane_leader", "1 if this process leads the role", labels=["role"]
        )
        for role, leads in sorted(found.get("leader", {}).items()):
            leader.add_metric([role], float(leads))
        yield leader
        yield GaugeMetricFamily(
            "httpbus_cutovers_active",
            "cutovers this process drives now (0 unless it leads the cutovers)",
            value=found.get("cutovers_active", 0),
        )
        failovers = CounterMetricFamily(
            "httpbus_failovers",
            "failovers this process started as leader, by topic and trigger (failures, latency)",
            labels=["topic", "trigger"],
        )
        for (topic, trigger), count in sorted(found.get("failovers", {}).items()):
            failovers.add_metric([topic, trigger], float(count))
        yield failovers
        yield from _audit_metrics(found.get("audit"))


def _audit_metrics(run: dict[str, Any] | None) -> Iterator[Metric]:
    """The newest reconciliation run's findings (absent until one is stored)."""
    if run is None:
        return
    for name, help_text in (
        ("lost", "messages the newest audit run found lost"),
        ("duplicates", "duplicate deliveries the newest audit run found"),
        ("late", "messages the newest audit run found delivered late"),
    ):
        yield GaugeMetricFamily(f"httpbus_audit_last_run_{name}", help_text, value=run[name])
    yield GaugeMetricFamily(
        "httpbus_audit_last_run_timestamp_seconds",
        "when the newest audit run started",
        value=run["started_at_ms"] / 1000,
    )


class MetricsMiddleware:
    """Counts every HTTP request of the app by its route template and status."""

    def __init__(self, app: ASGIApp, metrics: ControlPlaneMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status = time.perf_counter(), [500]

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "_other")
            method = scope.get("method", "")
            self.metrics.requests.labels(method, route, str(status[0])).inc()
            self.metrics.latency.labels(method, route).observe(time.perf_counter() - started)

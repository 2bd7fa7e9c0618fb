"""The worker process: a :class:`Worker` plus a tiny HTTP server for health and metrics."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core import metrics_group, telemetry
from core.errors import HttpbusError, NotReady
from core.membership import member_data
from core.metrics_group import LOCAL
from core.prefork import Slot
from core.version import VERSION
from metastore.protocol import MetaStore
from segments.backends import open_backends
from segments.protocol import SegmentStore

from .endpoint_auth import JwtSigner
from .http_sender import make_sender
from .settings import WorkerSettings
from .stats import COUNTERS, RunnerStats
from .worker import Worker

CIRCUIT_STATES = ("closed", "open", "half_open")
_HELP = {
    "delivered": "messages delivered (2xx)",
    "filtered": "messages filtered out",
    "filter_errors": "messages whose filter could not be evaluated",
    "attempts": "delivery attempts",
    "failed_attempts": "delivery attempts that failed",
    "retried": "failed attempts followed by another (in place or through a delay level)",
    "dead_lettered": "messages that failed for good, handed to the dead-letter queue",
    "sidelined": "messages sent to the dead-letter queue unattempted, behind their group's "
    "failed head",
    "failed_commits": "commits of delivered positions that failed (delivery went on; the next "
    "commit supersedes a failed one)",
}


class WorkerCollector(Collector):
    """Reads the worker's runner counters at scrape time (no work on the delivery path)."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    def collect(self) -> Iterator[Metric]:
        stats = self.worker.stats()
        for name in COUNTERS:
            family = CounterMetricFamily(
                f"httpbus_delivery_{name}", _HELP[name], labels=["subscription"]
            )
            for key, s in sorted(stats.items()):
                family.add_metric([key], getattr(s, name))
            yield family
        in_flight = GaugeMetricFamily(
            "httpbus_delivery_in_flight", "deliveries in flight", labels=["subscription"]
        )
        for key, s in sorted(stats.items()):
            in_flight.add_metric([key], s.in_flight)
        yield in_flight
        yield from _circuit_metrics(stats)
        yield from _lifecycle_metrics(stats)
        yield from _backlog_metrics(stats, time.time())
        yield _latency_metric(stats)
        yield GaugeMetricFamily(
            "httpbus_worker_assigned_subscriptions",
            "subscriptions assigned to this worker",
            value=len(self.worker.assigned),
        )
        yield GaugeMetricFamily(
            "httpbus_worker_running_subscriptions",
            "subscriptions with a running runner",
            value=len(self.worker.runners),
        )


def _lifecycle_metrics(stats: Mapping[str, RunnerStats]) -> Iterator[Metric]:
    """Endpoint lifecycle (:mod:`.disabling`): which subscriptions are disabled, how long
    each failing endpoint has failed every attempt, and the disablings this worker made."""
    disabled = GaugeMetricFamily(
        "httpbus_subscription_disabled",
        "1 while the subscription is disabled (its endpoint failed for too long)",
        labels=["subscription"],
    )
    failing = GaugeMetricFamily(
        "httpbus_subscription_endpoint_failing_seconds",
        "how long the endpoint has failed every attempt (absent: it has not)",
        labels=["subscription"],
    )
    total = CounterMetricFamily(
        "httpbus_subscription_disablings",
        "times this worker disabled the subscription because its endpoint failed too long",
        labels=["subscription"],
    )
    for key, s in sorted(stats.items()):
        disabled.add_metric([key], float(s.disabled))
        if s.failing_s is not None:
            failing.add_metric([key], s.failing_s)
        total.add_metric([key], s.disablings)
    yield disabled
    yield failing
    yield total


def _backlog_metrics(stats: Mapping[str, RunnerStats], now: float) -> Iterator[Metric]:
    """Per running subscription: messages not committed yet, sampled from the storage every
    few seconds, and the age of the oldest message read and not terminal yet (0 if none)."""
    lag = GaugeMetricFamily(
        "httpbus_subscription_lag_messages",
        "messages of the consume segment not committed yet",
        labels=["subscription"],
    )
    age = GaugeMetricFamily(
        "httpbus_subscription_oldest_unacked_age_seconds",
        "age of the oldest message read and not delivered, filtered or handed off yet",
        labels=["subscription"],
    )
    for key, s in sorted(stats.items()):
        if s.lag is not None:
            lag.add_metric([key], s.lag)
        oldest = s.oldest_unacked_ms
        age.add_metric([key], 0.0 if oldest is None else max(0.0, now - oldest / 1000))
    yield lag
    yield age


def _latency_metric(stats: Mapping[str, RunnerStats]) -> Metric:
    """Accepted to 2xx per subscription, retries and delays included (:mod:`.latency`)."""
    family = HistogramMetricFamily(
        "httpbus_delivery_latency_seconds",
        "from acceptance by the producer to the endpoint's 2xx",
        labels=["subscription"],
    )
    for key, s in sorted(stats.items()):
        family.add_metric([key], s.latency.cumulative(), s.latency.total_s)
    return family


def _circuit_metrics(stats: Mapping[str, RunnerStats]) -> Iterator[Metric]:
    """Per subscription with a breaker: its state (one series per state, 1 for the current
    one, the Prometheus way to show an enum) and the attempts a second it allows now."""
    state = GaugeMetricFamily(
        "httpbus_circuit_state",
        "circuit breaker state (1 for the current one)",
        labels=["subscription", "state"],
    )
    rate = GaugeMetricFamily(
        "httpbus_circuit_rate_per_second",
        "delivery attempts a second the circuit breaker allows now",
        labels=["subscription"],
    )
    for key, s in sorted(stats.items()):
        if s.circuit_state is None or s.circuit_rate is None:
            continue  # breaker disabled
        for name in CIRCUIT_STATES:
            state.add_metric([key, name], float(s.circuit_state == name))
        rate.add_metric([key], s.circuit_rate)
    yield state
    yield rate


def create_app(
    settings: WorkerSettings,
    *,
    metastore: MetaStore | None = None,
    stores: dict[str, SegmentStore] | None = None,
    slot: Slot | None = None,
) -> Starlette:
    """The worker service; ``metastore`` and ``stores`` are opened from ``settings`` unless
    given (already started) by the caller; ``slot``: which process of a group
    (:mod:`core.prefork`) this is, whose ``/metrics`` answers for all of them."""
    telemetry.setup("worker")  # spans, if OTEL_EXPORTER_OTLP_ENDPOINT says so

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            meta, opened, audit = await open_backends(
                stack, settings, metastore=metastore, stores=stores
            )
            sender = make_sender(settings, JwtSigner(meta))
            await stack.enter_async_context(sender)
            worker = Worker(
                meta,
                opened,
                sender,
                settings.member_id,
                audit=audit,
                member_data=member_data(settings.host, settings.port),
                commit_every_n=settings.commit_every_n,
                commit_every_s=settings.commit_every_s,
                lock_retry_s=settings.lock_retry_s,
                status_interval_s=settings.status_interval_s,
                # Half the pool at most: one slow endpoint leaves the rest to the others.
                max_in_flight_per_subscription=max(1, settings.max_connections // 2),
            )
            await stack.enter_async_context(worker)
            registry = CollectorRegistry()
            registry.register(WorkerCollector(worker))
            app.state.worker, app.state.registry = worker, registry
            yield

    app = Starlette(
        routes=[
            Route("/healthz", _healthz),
            Route("/readyz", _readyz),
            Route("/metrics", _metrics),
        ],
        lifespan=lifespan,
    )
    app.state.slot = slot
    return app


async def _healthz(request: Request) -> Response:
    """Liveness: the process serves requests."""
    return JSONResponse({"status": "ok", "service": "worker", "version": VERSION})


async def _readyz(request: Request) -> Response:
    """Readiness: the metastore answers a read within two seconds, and this process may act
    as its member (its lease was not revoked: metastore/lease.py)."""
    worker: Worker = request.app.state.worker
    if (revoked := worker.metastore.lease.revoked) is not None:
        refused = NotReady(revoked)
        return JSONResponse(refused.to_body(), status_code=refused.code.status)
    try:
        async with asyncio.timeout(2.0):
            await worker.catalog.list_projects()
    except (TimeoutError, HttpbusError):
        return JSONResponse(
            {"code": "metastore_unavailable", "message": "the metastore does not answer"},
            status_code=503,
            headers={"Retry-After": "5"},
        )
    return JSONResponse({"status": "ready", "assigned": len(worker.assigned)})


async def _metrics(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.registry
    body = generate_latest(registry)
    slot: Slot | None = request.app.state.slot
    if slot is not None and LOCAL not in request.query_params:
        body = await metrics_group.gather(body, slot)
    return Response(body, media_type="text/plain; version=0.0.4")

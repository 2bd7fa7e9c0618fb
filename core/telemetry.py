"""OpenTelemetry spans of publish and delivery, when the deployment asks for them.

Optional: with the ``otel`` extra installed (``pip install 'httpbus[otel]'``) and
``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) set, a producer
emits a ``publish`` span per accepted message and a worker a ``deliver`` span per attempt,
exported over OTLP/HTTP in batches. Both spans are children of the ``traceparent`` the client
sent with its publish (carried to the endpoint unchanged, docs/producing.md), so a trace in
Jaeger or Tempo shows the client's span, the publish and every delivery attempt together.
Without both, nothing here runs: :data:`enabled` is false and the hot paths skip it.

The standard ``OTEL_*`` variables (service name, headers, sampler) apply as usual;
``OTEL_SERVICE_NAME`` defaults to ``httpbus-<service>``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any

log = logging.getLogger(__name__)

enabled = False  # set by setup(); read on every publish and delivery
_tracer: Any = None
_propagator: Any = None


def setup(service: str, exporter: Any = None) -> bool:
    """Turn spans on for this process if configured (or if an ``exporter`` is given, as
    tests do). Whether they are on."""
    global enabled, _tracer, _propagator
    endpoint = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    )
    if exporter is None and not endpoint:
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
    except ImportError:
        log.warning("OTEL_EXPORTER_OTLP_ENDPOINT is set but the otel extra is not installed")
        return False
    name = os.environ.get("OTEL_SERVICE_NAME", f"httpbus-{service}")
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    if exporter is None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    _tracer = trace.get_tracer("httpbus", tracer_provider=provider)
    _propagator = TraceContextTextMapPropagator()
    enabled = True
    return True


def _parent(headers: Sequence[tuple[str, bytes]]) -> Any:
    carrier = {k: v.decode("latin-1") for k, v in headers if k in ("traceparent", "tracestate")}
    return _propagator.extract(carrier) if carrier else None


def publish_span(
    headers: Sequence[tuple[str, bytes]],
    topic: str,
    message_id: str,
    start_ns: int,
    end_ns: int,
) -> None:
    """Record the publish of one message (its stored headers), from ``start_ns`` to
    ``end_ns`` (time.time_ns()), as a child of the client's traceparent."""
    attributes = {"messaging.operation.type": "publish", "messaging.destination.name": topic}
    _record(f"publish {topic}", "PRODUCER", headers, message_id, start_ns, end_ns, attributes)


def deliver_span(
    headers: Sequence[tuple[str, bytes]],
    subscription: str,
    message_id: str,
    attempt: int,
    start_ns: int,
    end_ns: int,
    status: int | None,
    error: str | None,
) -> None:
    """Record one delivery attempt, a child of the client's traceparent (the publish span's
    sibling), with the endpoint's status or the error."""
    attributes: dict[str, Any] = {
        "messaging.operation.type": "process",
        "messaging.consumer.group.name": subscription,
        "httpbus.attempt": attempt,
    }
    if status is not None:
        attributes["http.response.status_code"] = status
    name = f"deliver {subscription}"
    _record(name, "CONSUMER", headers, message_id, start_ns, end_ns, attributes, error)


def _record(
    name: str,
    kind: str,
    headers: Sequence[tuple[str, bytes]],
    message_id: str,
    start_ns: int,
    end_ns: int,
    attributes: Mapping[str, Any],
    error: str | None = None,
) -> None:
    from opentelemetry.trace import SpanKind, Status, StatusCode

    span = _tracer.start_span(
        name,
        context=_parent(headers),
        kind=SpanKind[kind],
        start_time=start_ns,
        attributes={
            "messaging.system": "httpbus",
            "messaging.message.id": message_id,
            **attributes,
        },
    )
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error[:200]))
    span.end(end_time=end_ns)

"""With OpenTelemetry on, the producer records a publish span and the worker a deliver span
per attempt, both children of the traceparent the client sent (which still reaches the
endpoint unchanged); with it off (the default) nothing is recorded."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from core import telemetry
from tests.support.producer import produce_url, producer_env

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT}-01"


async def test_publish_and_delivery_spans_are_children_of_the_clients_traceparent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exporter = InMemorySpanExporter()
    monkeypatch.setattr(telemetry, "enabled", False)  # restored after the test
    assert telemetry.setup("test", exporter=exporter)
    async with producer_env(tmp_path, {"orders": {}}) as env:
        r = await env.client.post(
            produce_url("orders"), content=b"x", headers={"traceparent": TRACEPARENT}
        )
        assert r.status_code == 201, r.text
        mid = r.json()["message_id"]
        await env.delivered("orders", {mid})
    spans = exporter.get_finished_spans()
    publish = next(s for s in spans if s.kind is SpanKind.PRODUCER)
    deliver = next(s for s in spans if s.kind is SpanKind.CONSUMER)
    for span in (publish, deliver):
        assert format(span.context.trace_id, "032x") == TRACE_ID
        assert span.parent is not None and format(span.parent.span_id, "016x") == PARENT
        assert span.attributes is not None
        assert span.attributes["messaging.message.id"] == mid
    assert publish.name == "publish shop/orders"
    assert deliver.attributes is not None
    assert deliver.attributes["http.response.status_code"] == 204
    assert deliver.start_time is not None and publish.end_time is not None
    assert publish.end_time <= deliver.start_time


def test_off_unless_an_endpoint_is_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT", raising=False)
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    monkeypatch.setattr(telemetry, "enabled", False)
    assert not telemetry.setup("test")
    assert not telemetry.enabled

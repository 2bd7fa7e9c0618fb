"""The chart's monitoring: the PrometheusRule and the Grafana dashboard render only when
asked, every query parses as PromQL, and every metric they read is one the services really
export (collected here from the producer's, the worker's and the control plane's own
collectors), so a renamed metric cannot leave a silent alert or an empty panel behind."""

from __future__ import annotations

import json
import re
from typing import Any

import promql_parser
from prometheus_client import CollectorRegistry, generate_latest

from control_plane.api.metrics import ControlPlaneMetrics
from delivery_workers.app import WorkerCollector
from delivery_workers.stats import RunnerStats
from producer_api.metrics import ProducerMetrics
from tests.support.helm import helm_fixture, render  # noqa: F401  (the helm fixture)

ON = ["--set", "prometheusRule.enabled=true,grafanaDashboard.enabled=true"]
ALERTS = {
    "HttpbusSubscriptionLagGrowing",
    "HttpbusOldestMessageTooOld",
    "HttpbusDeadLettersGrowing",
    "HttpbusCircuitOpen",
    "HttpbusAuditFoundLosses",
}
SUFFIXES = ("_total", "_bucket", "_count", "_sum", "_created")


def _queries(docs: list[dict[str, Any]]) -> dict[str, str]:
    """Every query of the rules and the dashboard, by where it is."""
    found: dict[str, str] = {}
    for doc in docs:
        if doc["kind"] == "PrometheusRule":
            for group in doc["spec"]["groups"]:
                for rule in group["rules"]:
                    found[rule["alert"]] = rule["expr"]
        if doc["kind"] == "ConfigMap" and "httpbus.json" in doc.get("data", {}):
            for panel in json.loads(doc["data"]["httpbus.json"])["panels"]:
                for target in panel["targets"]:
                    found[f"{panel['title']} {target['refId']}"] = target["expr"]
    return found


def _exported() -> set[str]:
    """The metric families the three services export, from their own collectors."""
    texts = [ProducerMetrics().render()]
    worker: Any = type("W", (), {})()
    stats = RunnerStats(lag=1, oldest_unacked_ms=1, circuit_state="open", circuit_rate=1.0)
    worker.stats, worker.assigned, worker.runners = lambda: {"p/s": stats}, set(), {}
    registry = CollectorRegistry()
    registry.register(WorkerCollector(worker))
    texts.append(generate_latest(registry))
    cp = ControlPlaneMetrics()
    audit = {"lost": 1, "duplicates": 1, "late": 1, "started_at_ms": 1}
    cp.watch(lambda: {"leader": {"assigner": True}, "cutovers_active": 0, "audit": audit})
    texts.append(cp.render())
    names = set()
    for text in texts:
        names |= set(re.findall(r"^# TYPE (\w+) ", text.decode(), re.MULTILINE))
    return names


def _family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name.removesuffix(suffix)
    return name


def test_monitoring_is_off_by_default(helm: str) -> None:
    docs = render(helm)
    assert not [d for d in docs if d["kind"] == "PrometheusRule"]
    assert _queries(docs) == {}


def test_every_alert_and_panel_query_parses_and_reads_exported_metrics(
    helm: str,
) -> None:
    docs = render(helm, *ON)
    queries = _queries(docs)
    assert ALERTS <= queries.keys()
    assert len(queries) - len(ALERTS) >= 14  # the dashboard's panels
    exported = _exported()
    for where, expr in queries.items():
        promql_parser.parse(expr.replace("$__rate_interval", "5m"))  # raises if not PromQL
        for name in re.findall(r"\bhttpbus_\w+", expr):
            assert _family(name) in {_family(n) for n in exported}, f"{where}: {name} not exported"


def test_the_dashboard_is_labelled_for_the_grafana_sidecar(helm: str) -> None:
    (board,) = [d for d in render(helm, *ON) if d["metadata"]["name"].endswith("-dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(board["data"]["httpbus.json"])["uid"] == "httpbus-overview"

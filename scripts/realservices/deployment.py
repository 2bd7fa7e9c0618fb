"""A deployment file (docs/configuration.md) for the servers ``make services-up`` started:
ZooKeeper as the metastore, Kafka and Pulsar as clusters, the audit trail on Kafka and the
reports and trace index in PostgreSQL. ``make run-real`` feeds it to ``httpbus run``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def deployment(
    endpoints: Mapping[str, str],
    *,
    admin_token: str,
    root: str = "/httpbus",
    prefix: str = "httpbus",
    ports: tuple[int, int, int] = (8700, 8701, 8702),
    database_url: str | None = None,
) -> dict[str, Any]:
    """The file's content for ``endpoints`` (the state file's), as a mapping to dump."""
    cp, producer, worker = ports
    return {
        "admin_token": admin_token,
        "metastore": {"kind": "zookeeper", "hosts": endpoints["zookeeper"], "root": root},
        "clusters": {
            "kafka-main": {"backend": "kafka", "bootstrap_servers": endpoints["kafka"]},
            "pulsar-main": {
                "backend": "pulsar",
                "service_url": endpoints["pulsar"],
                "admin_url": endpoints["pulsar_admin"],
            },
        },
        "audit": {"cluster": "kafka-main", "topic": f"{prefix}.audit"},
        # The servers and the endpoints of the tour are on this machine.
        "endpoint_policy": {"allow_private_networks": True},
        "control_plane": {
            "port": cp,
            "default_cluster": "kafka-main",
            "storage_topic_prefix": prefix,
            "database_url": database_url or endpoints["postgres"],
        },
        # The ids of topics with a dedupe_window: the same database (httpbus db upgrade).
        "producer": {
            "port": producer,
            "dedupe": {"kind": "postgres", "url": database_url or endpoints["postgres"]},
        },
        "worker": {"port": worker},
    }

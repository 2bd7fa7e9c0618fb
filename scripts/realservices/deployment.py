"""A deployment file (docs/configuration.md) for the servers ``make services-up`` started:
ZooKeeper as the metastore, Kafka and Pulsar as clusters, the audit trail on Kafka and the
reports and trace index in PostgreSQL. ``make run-real`` feeds it to ``httpbus run``.

On the cluster topology (``--topology cluster``: three ZooKeeper peers, three Kafka brokers,
no Pulsar or PostgreSQL) it holds what runs there, with production's replication: every
storage topic on 3 replicas with ``min.insync.replicas`` 2 (docs/running.md)."""

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
    replicated: bool = False,
) -> dict[str, Any]:
    """The file's content for ``endpoints`` (the state file's), as a mapping to dump; with
    ``replicated`` (the cluster topology), Kafka topics on 3 replicas, 2 in sync."""
    cp, producer, worker = ports
    kafka: dict[str, Any] = {"backend": "kafka", "bootstrap_servers": endpoints["kafka"]}
    if replicated:
        kafka |= {"replication_factor": 3, "min_insync_replicas": 2}
    clusters: dict[str, Any] = {"kafka-main": kafka}
    if "pulsar" in endpoints:
        clusters["pulsar-main"] = {
            "backend": "pulsar",
            "service_url": endpoints["pulsar"],
            "admin_url": endpoints["pulsar_admin"],
        }
    database = database_url or endpoints.get("postgres")
    control_plane: dict[str, Any] = {
        "port": cp,
        "default_cluster": "kafka-main",
        "storage_topic_prefix": prefix,
    }
    if "s3" in endpoints:  # topics may archive to its bucket (docs/archive.md)
        control_plane["archive"] = {
            "s3_endpoint": endpoints["s3"],
            "s3_access_key_id": endpoints["s3_access_key_id"],
            "s3_secret_access_key": endpoints["s3_secret_access_key"],
            "s3_buckets": [endpoints["s3_bucket"]],
        }
    producer_section: dict[str, Any] = {"port": producer}
    if database:
        control_plane["database_url"] = database
        # The ids of topics with a dedupe_window: the same database (httpbus db upgrade).
        producer_section["dedupe"] = {"kind": "postgres", "url": database}
    return {
        "admin_token": admin_token,
        "metastore": {"kind": "zookeeper", "hosts": endpoints["zookeeper"], "root": root},
        "clusters": clusters,
        "audit": {"cluster": "kafka-main", "topic": f"{prefix}.audit"},
        # The servers and the endpoints of the tour are on this machine.
        "endpoint_policy": {"allow_private_networks": True},
        "control_plane": control_plane,
        "producer": producer_section,
        "worker": {"port": worker},
    }

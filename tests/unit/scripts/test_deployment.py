"""The deployment file ``make run-real`` writes for the real servers loads in all three
services; ``httpbus run`` refuses a file that is one service's only."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from cli import cli
from control_plane.settings import ControlPlaneSettings
from delivery_workers.settings import WorkerSettings
from producer_api.settings import ProducerSettings
from scripts.realservices.deployment import deployment

ENDPOINTS = {
    "zookeeper": "127.0.0.1:2181",
    "kafka": "127.0.0.1:9092",
    "pulsar": "pulsar://127.0.0.1:6650",
    "pulsar_admin": "http://127.0.0.1:8080",
    "postgres": "postgresql://httpbus@127.0.0.1:5439/postgres",
    "s3": "http://127.0.0.1:8710",
    "s3_bucket": "httpbus-archive",
    "s3_access_key_id": "httpbus",
    "s3_secret_access_key": "httpbus-secret",
}


def test_the_real_servers_deployment_loads_in_every_service(tmp_path: Path) -> None:
    path = tmp_path / "real.yaml"
    path.write_text(yaml.safe_dump(deployment(ENDPOINTS, admin_token="t" * 32)))
    cp = ControlPlaneSettings.load(path)
    assert (cp.default_cluster, cp.database_url) == ("kafka-main", ENDPOINTS["postgres"])
    # topics of the tour may archive to S3Proxy's bucket (docs/archive.md)
    assert (
        cp.archive.s3_buckets == ["httpbus-archive"] and cp.archive.s3_endpoint == ENDPOINTS["s3"]
    )
    assert ProducerSettings.load(path).port == 8701
    worker = WorkerSettings.load(path)
    assert (worker.port, worker.metastore.kind, worker.audit.cluster) == (
        8702,
        "zookeeper",
        "kafka-main",
    )


def test_httpbus_run_needs_a_deployment_file(tmp_path: Path) -> None:
    path = tmp_path / "worker.yaml"
    path.write_text("port: 9000\n")
    result = CliRunner().invoke(cli, ["run", "--config", str(path)])
    assert result.exit_code == 2
    assert "no control_plane, producer or worker section" in result.output


def test_the_cluster_deployment_replicates_and_leaves_out_what_the_cluster_lacks(
    tmp_path: Path,
) -> None:
    """``--topology cluster`` runs three ZooKeeper peers and three Kafka brokers only."""
    endpoints = {
        "zookeeper": "127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283",
        "kafka": "127.0.0.1:9192,127.0.0.1:9193,127.0.0.1:9194",
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(deployment(endpoints, admin_token="t" * 32, replicated=True)))
    producer = ProducerSettings.load(path)
    kafka = producer.clusters["kafka-main"]
    assert (kafka.replication_factor, kafka.min_insync_replicas) == (3, 2)  # type: ignore[union-attr]
    assert set(producer.clusters) == {"kafka-main"} and producer.dedupe is None
    assert ControlPlaneSettings.load(path).database_url.startswith("sqlite:")  # the default
    assert WorkerSettings.load(path).metastore.hosts == endpoints["zookeeper"]  # type: ignore[union-attr]

"""One configuration file for a deployment: the three services read the same file, each its
own section plus the shared settings it has; unknown keys are refused wherever they are; the
environment still overrides the file; a file without sections is still one service's file."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from control_plane.settings import ControlPlaneSettings
from delivery_workers.settings import WorkerSettings
from producer_api.settings import ProducerSettings

DEPLOYMENT = """
admin_token: a-long-enough-admin-token-0123456789
metastore: {kind: zookeeper, hosts: "zk1:2181,zk2:2181", root: /bus}
clusters:
  kafka-main: {backend: kafka, bootstrap_servers: "k1:9092", replication_factor: 3}
audit: {cluster: kafka-main, topic: bus.audit}
endpoint_policy: {allow_private_networks: false, deny: ["10.9.0.0/16"]}
control_plane:
  port: 9700
  default_cluster: kafka-main
  database_url: postgresql://bus@db/bus
producer:
  port: 9701
worker:
  port: 9702
  commit_every_s: 0.5
"""


def _file(tmp_path: Path, text: str, name: str = "httpbus.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_each_service_takes_its_section_and_the_shared_settings(tmp_path: Path) -> None:
    path = _file(tmp_path, DEPLOYMENT)
    cp = ControlPlaneSettings.load(path)
    producer = ProducerSettings.load(path)
    worker = WorkerSettings.load(path)
    assert (cp.port, producer.port, worker.port) == (9700, 9701, 9702)
    for settings in (cp, producer, worker):
        assert settings.metastore.kind == "zookeeper"
        assert sorted(settings.clusters) == ["kafka-main"]
        assert settings.audit.topic == "bus.audit"
    assert cp.admin_token is not None and producer.admin_token is not None
    assert cp.admin_token.get_secret_value() == producer.admin_token.get_secret_value()
    assert cp.database_url == "postgresql://bus@db/bus"
    assert worker.commit_every_s == 0.5
    assert [str(n) for n in worker.endpoint_policy.deny] == ["10.9.0.0/16"]


def test_the_environment_still_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPBUS_PORT", "9999")
    assert WorkerSettings.load(_file(tmp_path, DEPLOYMENT)).port == 9999


def test_a_top_level_key_that_is_not_shared_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, DEPLOYMENT + "commit_every_s: 2\n")
    with pytest.raises(ValueError, match="commit_every_s at the top level"):
        WorkerSettings.load(path)


def test_an_unknown_key_in_a_section_is_refused(tmp_path: Path) -> None:
    path = _file(tmp_path, DEPLOYMENT.replace("  port: 9701", "  prot: 9701"))
    with pytest.raises(ValidationError, match="prot"):
        ProducerSettings.load(path)


def test_a_file_without_sections_is_one_services_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "port: 9801\ncommit_every_n: 10\n", "worker.yaml")
    worker = WorkerSettings.load(path)
    assert (worker.port, worker.commit_every_n) == (9801, 10)


def test_toml_works_the_same(tmp_path: Path) -> None:
    text = 'admin_token = "a-long-enough-admin-token-0123456789"\n[producer]\nport = 9711\n'
    producer = ProducerSettings.load(_file(tmp_path, text, "httpbus.toml"))
    assert producer.port == 9711


def test_the_example_in_the_docs_loads_in_all_three(tmp_path: Path) -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "configuration.md").read_text()
    example = doc.split("```yaml\n# httpbus.yaml", 1)[1].split("```", 1)[0]
    path = _file(tmp_path, "# httpbus.yaml" + example)
    ports = [s.load(path).port for s in (ControlPlaneSettings, ProducerSettings, WorkerSettings)]
    assert ports == [8700, 8701, 8702]

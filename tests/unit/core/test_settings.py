from pathlib import Path

import pytest
from pydantic import ValidationError

from control_plane.settings import ControlPlaneSettings


def test_file_then_environment_then_arguments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "httpbus.yaml"
    config.write_text(
        "port: 9000\n"
        "admin_token: from-file\n"
        "metastore: {kind: zookeeper, hosts: 'zk1:2181,zk2:2181', root: /prod}\n"
        "clusters:\n"
        "  kafka-main: {backend: kafka, bootstrap_servers: 'k1:9092', replication_factor: 3,"
        " min_insync_replicas: 2}\n"
        "  pulsar-main: {backend: pulsar, service_url: 'pulsar://p:6650'}\n"
        "default_cluster: kafka-main\n"
    )
    monkeypatch.setenv("HTTPBUS_ADMIN_TOKEN", "from-env")
    monkeypatch.setenv("HTTPBUS_METASTORE__SESSION_TIMEOUT_S", "30")
    settings = ControlPlaneSettings.load(config, port=9100)
    assert settings.port == 9100
    assert settings.admin_token is not None
    assert settings.admin_token.get_secret_value() == "from-env"
    assert settings.metastore.kind == "zookeeper"
    assert settings.metastore.hosts == "zk1:2181,zk2:2181"
    assert settings.metastore.session_timeout_s == 30
    kafka = settings.clusters["kafka-main"]
    assert kafka.backend == "kafka" and kafka.min_insync_replicas == 2


def test_toml_and_a_default_cluster_that_is_not_configured(tmp_path: Path) -> None:
    config = tmp_path / "httpbus.toml"
    config.write_text('default_cluster = "kafka-main"\n')
    with pytest.raises(ValidationError, match="default_cluster 'kafka-main' is not one of"):
        ControlPlaneSettings.load(config)


def test_unknown_keys_and_missing_files_are_refused(tmp_path: Path) -> None:
    config = tmp_path / "httpbus.yaml"
    config.write_text("prot: 1\n")
    with pytest.raises(ValidationError, match="prot"):
        ControlPlaneSettings.load(config)
    with pytest.raises(FileNotFoundError):
        ControlPlaneSettings.load(tmp_path / "absent.yaml")

"""The Helm chart (helm/httpbus): ``helm lint`` and ``helm template`` with the default and the
production values, then checks on what Kubernetes would receive.

Helm is built from Go modules by scripts/tools/helm.sh the first time (about three minutes on
two cores, then cached under ~/.cache/httpbus), hence the long timeout of this module.
The rendered settings files are loaded with the services' own settings classes, with the
environment the Deployments give them, so the chart cannot drift from what the services read.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from cli import audit, cli, local
from cli import export as export_cli
from control_plane.settings import ControlPlaneSettings
from core.archive import ArchiveStorage
from core.settings import SettingsBase
from delivery_workers.settings import WorkerSettings
from outbox_relay.settings import RelaySettings
from producer_api.settings import ProducerSettings
from tests.support.helm import (
    CHART,
    RELEASE,
    ROOT,
    helm_fixture,  # noqa: F401  (a fixture)
    render,
    run_helm,
)

PRODUCTION = CHART / "values-production.yaml"
FULLNAME = "rel-httpbus"
POD_IP = "10.42.7.19"
AUDIT_DB = "postgresql+psycopg://audit:pw@db:5432/httpbus"
AUDIT_ON = ["--set", "audit.enabled=true", "--set-string", f"secret.databaseUrl={AUDIT_DB}"]
EXPORT_ON = ["--set", "export.enabled=true", "--set", "export.to=s3a://lake/bus/"]
EXPORT_ON += ["--set", "export.topics[0].project=shop,export.topics[0].topic=orders"]
EXPORT_ON += ["--set", "export.topics[1].project=shop,export.topics[1].topic=payments"]

pytestmark = pytest.mark.timeout(1_500)

# Deployment component -> (image role, settings class); the role names its config file too.
SERVICES: dict[str, tuple[str, type[SettingsBase]]] = {
    "control-plane": ("control-plane", ControlPlaneSettings),
    "producer": ("producer", ProducerSettings),
    "worker": ("worker", WorkerSettings),
}
VALUES_KEY = {"control-plane": "controlPlane", "producer": "producer", "worker": "worker"}
MODULES = {
    "control-plane": "control_plane",
    "producer": "producer_api",
    "worker": "delivery_workers",
}


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True)
class Rendered:
    """The manifests of one `helm template`, and the values they were rendered from."""

    name: str
    values: dict[str, Any]
    docs: list[dict[str, Any]]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
        return found[0]

    def deployment(self, component: str) -> dict[str, Any]:
        return self.one("Deployment", f"{FULLNAME}-{component}")


VALUE_SETS = {"default": [], "production": [PRODUCTION]}


@pytest.fixture(scope="module", params=sorted(VALUE_SETS))
def rendered(request: pytest.FixtureRequest, helm: str) -> Rendered:
    files: list[Path] = VALUE_SETS[request.param]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for f in files:
        values = _deep_merge(values, yaml.safe_load(f.read_text()))
    args = [a for f in files for a in ("-f", str(f))]
    return Rendered(request.param, values, render(helm, *args))


@pytest.mark.parametrize("values", sorted(VALUE_SETS))
def test_helm_lint_passes_strict(helm: str, values: str) -> None:
    args = [a for f in VALUE_SETS[values] for a in ("-f", str(f))]
    done = run_helm(helm, "lint", "--strict", str(CHART), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def _containers(pod_spec: dict[str, Any]) -> list[dict[str, Any]]:
    return list(pod_spec["containers"]) + list(pod_spec.get("initContainers", []))


def _assert_unprivileged(what: str, pod_spec: dict[str, Any]) -> None:
    pod_sc = pod_spec.get("securityContext", {})
    assert pod_sc.get("runAsNonRoot") is True, f"{what}: pod runAsNonRoot"
    assert pod_sc.get("runAsUser", 0) != 0, f"{what}: pod runs as uid 0"
    assert pod_spec.get("automountServiceAccountToken") is False, what
    for c in _containers(pod_spec):
        sc = c.get("securityContext", {})
        assert sc.get("allowPrivilegeEscalation") is False, f"{what}/{c['name']}: escalation"
        assert sc.get("readOnlyRootFilesystem") is True, f"{what}/{c['name']}: writable root"
        assert sc.get("capabilities", {}).get("drop") == ["ALL"], f"{what}/{c['name']}: caps"
        assert sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is True, what
        assert sc.get("privileged") in (None, False), what
        res = c.get("resources", {})
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(res.get(kind, {})), f"{what}/{c['name']}: {kind}"


def test_every_deployment_has_probes_resources_and_no_privilege(rendered: Rendered) -> None:
    deployments = rendered.of_kind("Deployment")
    relays = [f"{FULLNAME}-outbox-{r['name']}" for r in _relays(rendered.values)]
    assert sorted(d["metadata"]["name"] for d in deployments) == sorted(
        [f"{FULLNAME}-{c}" for c in SERVICES] + relays
    )
    for dep in (d for d in deployments if d["metadata"]["name"] not in relays):
        name = dep["metadata"]["name"]
        spec = dep["spec"]["template"]["spec"]
        _assert_unprivileged(name, spec)
        for c in spec["containers"]:
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
                get = c[probe]["httpGet"]
                assert get["path"] == path, f"{name}: {probe}"
                assert get["port"] in ports or get["port"] in ports.values(), f"{name}: {probe}"
        # /tmp is the only writable place and it is an emptyDir.
        mounts = {m["mountPath"]: m["name"] for m in spec["containers"][0]["volumeMounts"]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert "emptyDir" in volumes[mounts["/tmp"]], name


def _secret_values(rendered: Rendered) -> dict[str, str]:
    """What the pods' secretKeyRefs resolve to: the rendered Secret, or made-up values standing
    in for the existingSecret of the production example."""
    secrets = rendered.of_kind("Secret")
    if rendered.values["secret"]["existingSecret"]:
        assert secrets == [], "existingSecret given: the chart must not create one"
        keys = ["admin-token", "database-url", *rendered.values["secret"]["env"]]
        return {k: f"from-existing-secret-{i}" for i, k in enumerate(keys)}
    (secret,) = secrets
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def _relays(values: dict[str, Any]) -> list[dict[str, Any]]:
    return list(values["outbox"]["relays"]) if values["outbox"]["enabled"] else []


def _referenced_secrets(values: dict[str, Any]) -> set[str]:
    """The Secrets the values name by reference besides the chart's own: the archive's S3 keys
    and each relay's database password and produce token."""
    names = {values["archive"]["s3CredentialsSecret"]["name"]}
    for relay in _relays(values):
        names |= {relay["database"]["passwordSecret"]["name"], relay["produceTokenSecret"]["name"]}
    return names - {""}


def _container_env(rendered: Rendered, container: dict[str, Any], pod_name: str) -> dict[str, str]:
    """The container's environment as the kubelet would build it."""
    secret_name = rendered.values["secret"]["existingSecret"] or FULLNAME
    values = _secret_values(rendered)
    env: dict[str, str] = {}
    for e in container.get("env", []):
        source = e.get("valueFrom")
        if source is None:
            env[e["name"]] = e["value"]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            if ref["name"] != secret_name:  # a Secret the values name by reference
                assert ref["name"] in _referenced_secrets(rendered.values), e
                env[e["name"]] = f"from-{ref['name']}-{ref['key']}"
            elif ref["key"] in values or not ref.get("optional"):
                env[e["name"]] = values[ref["key"]]
        elif source.get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[e["name"]] = pod_name
        elif source.get("fieldRef", {}).get("fieldPath") == "status.podIP":
            env[e["name"]] = POD_IP
        if e["name"] in env:  # $(NAME) of a variable defined above is expanded
            env[e["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env.get(m[1], m[0]), env[e["name"]])
    return env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    for key in list(os.environ):
        if key.upper().startswith("HTTPBUS_"):
            monkeypatch.delenv(key)
    yield monkeypatch


def _load_service(
    rendered: Rendered, component: str, tmp_path: Path, env: pytest.MonkeyPatch
) -> SettingsBase:
    """The settings the pod's process would read: its file from the ConfigMap (found through the
    container's args and mount) and its environment."""
    role, settings_cls = SERVICES[component]
    dep = rendered.deployment(component)
    spec = dep["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = container["args"]
    assert args[0] == role and args[1] == "--config", args
    config_path = Path(args[2])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    configmap = rendered.one("ConfigMap", volume["configMap"]["name"])
    file = tmp_path / config_path.name
    file.write_text(configmap["data"][config_path.name])
    pod_name = f"{FULLNAME}-{component}-5d9c7f8b6d-x7k2p"  # as a ReplicaSet names its pods
    for key, value in _container_env(rendered, container, pod_name).items():
        env.setenv(key, value)
    return settings_cls.load(file)


@pytest.mark.parametrize("component", sorted(SERVICES))
def test_config_file_loads_with_the_service_settings_and_holds_the_values(
    rendered: Rendered, component: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    v = rendered.values
    settings: Any = _load_service(rendered, component, tmp_path, clean_env)
    container = rendered.deployment(component)["spec"]["template"]["spec"]["containers"][0]
    assert settings.host == "0.0.0.0"
    assert (
        settings.port == container["ports"][0]["containerPort"] == v[VALUES_KEY[component]]["port"]
    )
    assert settings.member_id == f"{FULLNAME}-{component}-5d9c7f8b6d-x7k2p"
    zk = v["metastore"]["zookeeper"]
    assert settings.metastore.kind == "zookeeper"
    assert (settings.metastore.hosts, settings.metastore.root) == (zk["hosts"], zk["root"])
    assert settings.metastore.session_timeout_s == zk["sessionTimeoutSeconds"]
    expected_clusters = {c["name"] for c in (v["kafka"], v["pulsar"]) if c["enabled"]}
    assert set(settings.clusters) == expected_clusters
    kafka = settings.clusters[v["kafka"]["name"]]
    assert kafka.bootstrap_servers == v["kafka"]["bootstrapServers"]
    assert (kafka.replication_factor, kafka.min_insync_replicas) == (
        v["kafka"]["replicationFactor"],
        v["kafka"]["minInsyncReplicas"],
    )
    assert (kafka.replication_factor, kafka.min_insync_replicas) == (3, 2)
    if v["pulsar"]["enabled"]:
        pulsar = settings.clusters[v["pulsar"]["name"]]
        assert (pulsar.service_url, pulsar.admin_url) == (
            v["pulsar"]["serviceUrl"],
            v["pulsar"]["adminUrl"],
        )
        assert (pulsar.tenant, pulsar.namespace) == (
            v["pulsar"]["tenant"],
            v["pulsar"]["namespace"],
        )
    for key, value in v[VALUES_KEY[component]]["config"].items():
        assert getattr(settings, key) == value, key
    if component == "control-plane":
        assert settings.default_cluster == v["defaultCluster"]
        assert settings.admin_token.get_secret_value() == _secret_values(rendered)["admin-token"]
        _assert_archive(settings.archive, v["archive"])
    else:
        assert settings.audit.cluster == v["auditTrail"]["cluster"]
        assert settings.audit.topic == v["auditTrail"]["topic"]


def test_secret_settings_reach_the_services_through_the_environment(
    helm: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """Passwords stay out of the ConfigMap and still end up in the settings."""
    docs = render(
        helm,
        "--set",
        "pulsar.enabled=true",
        "--set-string",
        "secret.env.HTTPBUS_CLUSTERS__pulsar-main__ADMIN_TOKEN=jwt-123",
        "--set-string",
        "secret.env.HTTPBUS_CLUSTERS__kafka-main__CLIENT__sasl\\.password=pw-456",
        "--set-string",
        "secret.adminToken=admin-789",
    )
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    rendered = Rendered("secrets", values, docs)
    assert "jwt-123" not in yaml.safe_dump(rendered.of_kind("ConfigMap"))
    for component in ("producer", "worker"):
        settings: Any = _load_service(rendered, component, tmp_path, clean_env)
        assert settings.clusters["pulsar-main"].admin_token == "jwt-123"
        assert settings.clusters["kafka-main"].client["sasl.password"] == "pw-456"
    cp: Any = _load_service(rendered, "control-plane", tmp_path, clean_env)
    assert cp.admin_token.get_secret_value() == "admin-789"
    worker_env = {
        e["name"]
        for e in rendered.deployment("worker")["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert "HTTPBUS_ADMIN_TOKEN" not in worker_env, "workers need no admin token"


@pytest.mark.parametrize("component", sorted(SERVICES))
def test_the_image_entrypoint_starts_the_service_the_chart_names(helm: str, component: str) -> None:
    """The Deployment's first argument is a role the image's entrypoint maps to the module."""
    docs = render(helm)
    dep = Rendered("default", {}, docs).deployment(component)
    role = dep["spec"]["template"]["spec"]["containers"][0]["args"][0]
    venv_bin = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["sh", str(ROOT / "scripts/tools/container/entrypoint.sh"), role, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert f"python -m {MODULES[component]}" in done.stdout


def test_control_plane_runs_two_replicas_and_producers_autoscale_on_cpu(
    rendered: Rendered,
) -> None:
    assert rendered.deployment("control-plane")["spec"]["replicas"] == 2
    producer = rendered.deployment("producer")
    assert "replicas" not in producer["spec"], "the autoscaler owns the producer's replicas"
    hpa = rendered.one("HorizontalPodAutoscaler", f"{FULLNAME}-producer")
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": producer["metadata"]["name"],
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    auto = rendered.values["producer"]["autoscaling"]
    assert (
        metric["resource"]["target"]["averageUtilization"] == auto["targetCPUUtilizationPercentage"]
    )
    assert 1 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


def test_every_deployment_has_a_pdb_and_spreads_over_nodes_and_zones(rendered: Rendered) -> None:
    pdbs = rendered.of_kind("PodDisruptionBudget")
    for component in SERVICES:
        dep = rendered.deployment(component)
        pod_labels = dep["spec"]["template"]["metadata"]["labels"]
        matching = [
            p for p in pdbs if p["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        ]
        assert len(matching) == 1, f"{component}: {len(matching)} PodDisruptionBudgets"
        assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        spread = dep["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        }
        for c in spread:
            assert c["labelSelector"]["matchLabels"].items() <= pod_labels.items()
            assert c["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
    control_plane_pdb = rendered.one("PodDisruptionBudget", f"{FULLNAME}-control-plane")
    assert control_plane_pdb["spec"]["minAvailable"] == 1


def test_services_select_their_deployments_pods(rendered: Rendered) -> None:
    for component in SERVICES:
        svc = rendered.one("Service", f"{FULLNAME}-{component}")
        pod_labels = rendered.deployment(component)["spec"]["template"]["metadata"]["labels"]
        assert svc["spec"]["selector"].items() <= pod_labels.items()
        assert svc["spec"]["selector"]["app.kubernetes.io/component"] == component
        assert svc["spec"]["ports"][0]["targetPort"] == "http"


# The audit CronJob with the production example, and with the defaults switched on.
AUDIT_SETS = {
    "production": ["-f", str(PRODUCTION)],
    "default": AUDIT_ON,
}


@pytest.fixture(scope="module", params=sorted(AUDIT_SETS))
def audit_rendered(request: pytest.FixtureRequest, helm: str) -> Rendered:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    if request.param == "production":
        values = _deep_merge(values, yaml.safe_load(PRODUCTION.read_text()))
    else:
        values["audit"]["enabled"], values["secret"]["databaseUrl"] = True, AUDIT_DB
    return Rendered(request.param, values, render(helm, *AUDIT_SETS[request.param]))


def test_audit_cronjob_only_when_enabled(rendered: Rendered) -> None:
    jobs = rendered.of_kind("CronJob")
    assert len(jobs) == (1 if rendered.values["audit"]["enabled"] else 0)


def _audit_container(rendered: Rendered) -> tuple[dict[str, Any], dict[str, Any]]:
    (job,) = rendered.of_kind("CronJob")
    assert job["spec"]["schedule"] == rendered.values["audit"]["schedule"]
    assert job["spec"]["concurrencyPolicy"] == "Forbid"
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    _assert_unprivileged("audit", pod)
    (container,) = pod["containers"]
    return pod, container


class _StopAtDatabase(Exception):
    """Raised where ``audit run`` first touches the report database."""


def _run_audit_cli(args: list[str], monkeypatch: pytest.MonkeyPatch) -> ControlPlaneSettings:
    """``httpbus ARGS`` through the real Typer app up to where the job first touches the
    database: the command line is parsed (unknown flags, bad values and missing files fail as
    they would in the pod), the settings loaded and the window checked. Returns the settings
    the command loaded."""
    loaded: list[ControlPlaneSettings] = []

    def load(config: Path | None) -> ControlPlaneSettings:
        loaded.append(ControlPlaneSettings.load(config))
        return loaded[-1]

    def upgrade(url: str) -> None:
        raise _StopAtDatabase(url)

    monkeypatch.setattr(audit, "ControlPlaneSettings", SimpleNamespace(load=load))
    monkeypatch.setattr(audit.migrate, "upgrade", upgrade)
    result = CliRunner().invoke(cli, args)
    assert isinstance(result.exception, _StopAtDatabase), f"{result.exit_code}: {result.output}"
    (settings,) = loaded
    assert str(result.exception) == settings.database_url
    return settings


def test_audit_cronjob_runs_httpbus_audit_run_with_settings_from_the_values(
    audit_rendered: Rendered, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """The job's command line runs the real CLI, and the settings it loads (the mounted file
    plus the pod's environment) name the values' Spark, trail and database."""
    v, (spec, container) = audit_rendered.values, _audit_container(audit_rendered)
    args = container["args"]
    assert args[:4] == ["httpbus", "audit", "run", "--mode"], args  # run by the entrypoint
    assert args[args.index("--mode") + 1] == "batch"
    assert args[args.index("--since") + 1] == v["audit"]["since"]
    assert args[args.index("--horizon") + 1] == v["audit"]["horizon"]
    assert "--master" not in args and "--jar" not in args, "Spark comes from the settings"
    config_path = Path(args[args.index("--config") + 1])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(vol for vol in spec["volumes"] if vol["name"] == mount["name"])
    configmap = audit_rendered.one("ConfigMap", volume["configMap"]["name"])
    file = tmp_path / config_path.name
    file.write_text(configmap["data"][config_path.name])
    env = _container_env(audit_rendered, container, f"{FULLNAME}-audit-29384551-qk5tz")
    for key, value in env.items():
        clean_env.setenv(key, value)
    pod_args = [str(file) if a == str(config_path) else a for a in args[1:]]
    settings = _run_audit_cli(pod_args, clean_env)
    assert settings.database_url == _secret_values(audit_rendered)["database-url"]
    assert settings.spark_master == v["audit"]["spark"]["master"]
    assert settings.spark_jars == v["audit"]["spark"]["jars"]
    assert (settings.audit.cluster, settings.audit.topic) == (
        v["auditTrail"]["cluster"],
        v["auditTrail"]["topic"],
    )
    assert settings.audit.cluster in settings.clusters
    assert settings.metastore.kind == "zookeeper"
    assert settings.metastore.hosts == v["metastore"]["zookeeper"]["hosts"]

    # pyspark appends PYSPARK_SUBMIT_ARGS, split like a shell line, to its spark-submit.
    submit = shlex.split(env["PYSPARK_SUBMIT_ARGS"])
    assert submit[-1] == "pyspark-shell" and submit[:-1:2] == ["--conf"] * (len(submit) // 2)
    conf = dict(kv.split("=", 1) for kv in submit[1:-1:2])
    assert conf["spark.driver.host"] == POD_IP, "executors call the driver back on the pod IP"
    for key, value in v["audit"]["spark"]["conf"].items():
        assert conf[key] == str(value), key


def test_audit_command_is_run_by_the_image_entrypoint(audit_rendered: Rendered) -> None:
    """The CronJob's first argument is no role: the entrypoint runs it as a command."""
    _, container = _audit_container(audit_rendered)
    venv_bin = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["sh", str(ROOT / "scripts/tools/container/entrypoint.sh"), *container["args"], "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert "Run the audit jobs and store their results" in done.stdout


def test_spark_jars_are_the_ones_the_image_resolves_from_the_pom() -> None:
    """values.yaml names the jars the Dockerfile copies from the realservices POM."""
    pom = ROOT / "scripts/realservices/poms/spark/pom.xml"
    ns = {"m": "http://maven.apache.org/POM/4.0.0"}
    deps = ET.parse(pom).getroot().findall("m:dependencies/m:dependency", ns)
    names = {
        f"{d.findtext('m:artifactId', namespaces=ns)}-{d.findtext('m:version', namespaces=ns)}.jar"
        for d in deps
    }
    jars = yaml.safe_load((CHART / "values.yaml").read_text())["audit"]["spark"]["jars"]
    assert {Path(j).name for j in jars} == names and len(jars) == len(names) == 4
    (folder,) = {str(Path(j).parent) for j in jars}
    # the Dockerfile's instructions, continuation lines joined and blanks squeezed
    dockerfile = " ".join((ROOT / "Dockerfile").read_text().replace("\\\n", " ").split())
    assert "scripts/realservices/poms/spark/pom.xml" in dockerfile
    let_in = (ROOT / ".dockerignore").read_text().splitlines()
    assert "!scripts/realservices/poms/spark/pom.xml" in let_in, "the build context needs it"
    assert f"copy-dependencies -DoutputDirectory={folder}" in dockerfile
    assert f"COPY --from=jars {folder} {folder}" in dockerfile


def _dockerfile_stages() -> dict[str, str]:
    """The Dockerfile's stages by name (the last one also as ``""``, the default target): each
    stage's instructions, continuation lines joined and blanks squeezed, comments dropped."""
    lines = (ROOT / "Dockerfile").read_text().replace("\\\n", " ").splitlines()
    stages: dict[str, str] = {}
    name = ""
    for line in (" ".join(x.split()) for x in lines if not x.lstrip().startswith("#")):
        if line.startswith("FROM "):
            name = line.split(" AS ")[-1] if " AS " in line else f"stage{len(stages)}"
            stages[name] = ""
        elif name:
            stages[name] += line + "\n"
    stages[""] = stages[name]
    return stages


def test_the_service_image_carries_no_spark_and_the_spark_image_does() -> None:
    """The default target (the services' image) installs httpbus without extras and no JRE;
    the spark target adds httpbus[spark], the JRE and the connector jars."""
    stages = _dockerfile_stages()
    assert "COPY --from=build /opt/httpbus /opt/httpbus" in stages[""]
    assert "openjdk" not in stages[""] and "jars" not in stages[""]
    assert "[spark]" not in stages["build"]
    assert '"$wheel[spark]"' in stages["build-spark"]
    assert "openjdk-17-jre-headless" in stages["spark"]
    assert "COPY --from=build-spark /opt/httpbus /opt/httpbus" in stages["spark"]


def test_spark_jobs_run_the_spark_image_and_the_services_the_service_image(helm: str) -> None:
    """The audit and export CronJobs and the migration check run the Spark image; the three
    services run the service image, which carries no Spark (the test above)."""
    check_on = ["--set", "migrationCheck.enabled=true"]
    check_on += ["--set", "migrationCheck.topics[0].project=shop,migrationCheck.topics[0].topic=o"]
    repo = "ghcr.io/httpbus/httpbus"
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    tags = ["--set", "image.tag=1.2", "--set", "image.sparkTag=1.2-jre"]
    for extra, service, spark in [
        ([], f"{repo}:{app}", f"{repo}:{app}-spark"),
        (tags, f"{repo}:1.2", f"{repo}:1.2-jre"),
    ]:
        docs = render(helm, *AUDIT_ON, *EXPORT_ON, *check_on, *extra)
        r = Rendered("images", {}, docs)
        for component in SERVICES:
            (container,) = r.deployment(component)["spec"]["template"]["spec"]["containers"]
            assert container["image"] == service, component
        pods = [j["spec"]["jobTemplate"]["spec"]["template"]["spec"] for j in r.of_kind("CronJob")]
        pods += [
            d["spec"]["template"]["spec"]
            for d in r.of_kind("Deployment")
            if "migration-check" in d["metadata"]["name"]
        ]
        assert len(pods) == 4, "the audit job, two exports, one migration check"
        assert {c["image"] for pod in pods for c in pod["containers"]} == {spark}


def test_audit_cronjob_with_default_values_needs_a_database(helm: str) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), "--set", "audit.enabled=true")
    assert done.returncode != 0 and "secret.databaseUrl" in done.stderr
    docs = render(
        helm,
        "--set",
        "audit.enabled=true",
        "--set-string",
        "secret.databaseUrl=postgresql+psycopg://u:p@db/httpbus",
    )
    (secret,) = [d for d in docs if d["kind"] == "Secret"]
    assert base64.b64decode(secret["data"]["database-url"]).decode().endswith("@db/httpbus")
    assert [d["kind"] for d in docs].count("CronJob") == 1


def test_generated_admin_token_is_long_and_random(helm: str) -> None:
    tokens = set()
    for _ in range(2):
        (secret,) = [d for d in render(helm) if d["kind"] == "Secret"]
        tokens.add(base64.b64decode(secret["data"]["admin-token"]).decode())
    assert len(tokens) == 2 and all(len(t) == 40 for t in tokens)


def test_service_monitor_scrapes_the_services_that_serve_metrics(rendered: Rendered) -> None:
    monitors = rendered.of_kind("ServiceMonitor")
    if not rendered.values["serviceMonitor"]["enabled"]:
        assert monitors == []
        return
    (monitor,) = monitors
    selector = monitor["spec"]["selector"]["matchLabels"]
    scraped = {
        s["metadata"]["labels"]["app.kubernetes.io/component"]
        for s in rendered.of_kind("Service")
        if selector.items() <= s["metadata"]["labels"].items()
    }
    wanted = {c for c in SERVICES if rendered.values[VALUES_KEY[c]]["metrics"]}
    if _relays(rendered.values) and rendered.values["outbox"]["metrics"]:
        wanted.add("outbox-relay")
    assert scraped == wanted
    assert scraped >= {"producer", "worker"}
    assert monitor["spec"]["endpoints"][0]["path"] == "/metrics"


# A second relay on the production example's database and slot.
RELAY_COPY = ["--set", "outbox.relays[1].project=shop,outbox.relays[1].topic=orders"]
RELAY_COPY += ["--set", "outbox.relays[1].database.host=shop-db.databases"]
RELAY_COPY += [
    "--set",
    "outbox.relays[1].database.dbname=shop,outbox.relays[1].database.slot=shop_outbox",
]
RELAY_COPY += [
    "--set",
    "outbox.relays[1].database.passwordSecret.name=s,outbox.relays[1].database.passwordSecret.key=k",
]
RELAY_COPY += [
    "--set",
    "outbox.relays[1].produceTokenSecret.name=s,outbox.relays[1].produceTokenSecret.key=k",
]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--set", "defaultCluster=nowhere"], 'defaultCluster "nowhere"'),
        (["--set", "auditTrail.cluster=pulsar-main"], 'auditTrail.cluster "pulsar-main"'),
        (["--set", "kafka.enabled=false"], "enable at least one storage cluster"),
        (["--set", "kafka.enabled=false,pulsar.enabled=true"], 'defaultCluster "kafka-main"'),
        # values.schema.json: a misspelt key, a wrong type, a missing limit
        (["--set", "kafka.bootstrapServer=k:9092"], "'bootstrapServer' not allowed"),
        (["--set-string", "kafka.replicationFactor=3"], "want integer"),
        (["--set", "worker.resources.limits=null"], "missing property 'limits'"),
        # the audit job: no trail to read, a Pulsar trail for remote executors, a bad window
        ([*AUDIT_ON, "--set", "auditTrail.cluster="], "audit.enabled needs auditTrail.cluster"),
        (
            [*AUDIT_ON, "--set", "pulsar.enabled=true,auditTrail.cluster=pulsar-main"]
            + ["--set", "audit.spark.master=spark://m:7077"],
            "cannot read an audit trail on Pulsar",
        ),
        ([*AUDIT_ON, "--set", "audit.since=yesterday"], "does not match pattern"),
        # the export job: nothing to export, nowhere to write, a topic without its project
        (["--set", "export.enabled=true,export.to=s3a://l"], "export.enabled needs export.topics"),
        ([*EXPORT_ON, "--set", "export.to="], "export.enabled needs export.to"),
        ([*EXPORT_ON, "--set", "export.topics[2].topic=x"], "missing property 'project'"),
        # the migration check: no topic, rounds too close
        (["--set", "migrationCheck.enabled=true"], "migrationCheck.enabled needs"),
        (["--set", "migrationCheck.every=0"], "minimum: got 0, want 0.5"),
        # the outbox relays: none, one slot read twice, a secret inline
        (["--set", "outbox.enabled=true"], "outbox.enabled needs outbox.relays"),
        (
            ["-f", str(PRODUCTION), "--set", "outbox.relays[1].name=shop2"] + RELAY_COPY,
            "read the same slot",
        ),
        (
            ["-f", str(PRODUCTION), "--set", "outbox.relays[0].name=Shop"],
            "does not match pattern",
        ),
        (
            ["-f", str(PRODUCTION), "--set-string", "outbox.relays[0].database.password=pw"],
            "'password' not allowed",
        ),
        (
            ["-f", str(PRODUCTION), "--set-string", "outbox.relays[0].config.produce_token=t"],
            "no produce_token in config",
        ),
        (
            ["-f", str(PRODUCTION), "--set-string", "outbox.config.database.password=pw"],
            "no database password in config",
        ),
    ],
)
def test_inconsistent_values_are_refused_at_render(
    helm: str, flags: list[str], message: str
) -> None:
    done = run_helm(helm, "template", RELEASE, str(CHART), *flags)
    assert done.returncode != 0
    assert message in done.stderr


def test_run_module_launcher_runs_a_module_as_main_with_its_arguments(tmp_path: Path) -> None:
    """spark-submit takes a file; the image's launcher turns it into `python -m MODULE`."""
    (tmp_path / "probe_mod.py").write_text("import sys\nprint('RAN', __name__, sys.argv[1:])\n")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts/tools/container/run_module.py"),
            "probe_mod",
            "a",
            "--b",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "RAN __main__ ['a', '--b']"


_KEY = re.compile(r"^( *)([A-Za-z][\w.-]*):(.*)$")


def _undocumented_values(text: str) -> list[str]:
    """Leaf values with no comment above them, nor above their siblings' run, nor above any of
    their parents (one comment may document a block)."""
    lines = text.splitlines()
    parents: list[tuple[int, bool]] = []  # (indent, documented)
    missing = []
    for i, line in enumerate(lines):
        m = _KEY.match(line)
        if not m:
            continue
        indent = len(m.group(1))
        while parents and parents[-1][0] >= indent:
            parents.pop()
        commented, j = False, i - 1
        while j >= 0 and lines[j].strip():
            above = lines[j]
            above_indent = len(above) - len(above.lstrip())
            is_comment = above.lstrip().startswith("#")
            if is_comment and above_indent == indent:
                commented = True
                break
            if above_indent < indent and not is_comment:
                break
            j -= 1
        documented = commented or (bool(parents) and parents[-1][1])
        if m.group(3).strip() and not documented:
            missing.append(f"line {i + 1}: {line.strip()}")
        parents.append((indent, documented))
    return missing


def test_values_yaml_documents_every_value() -> None:
    assert _undocumented_values((CHART / "values.yaml").read_text()) == []
    assert _undocumented_values("a:\n  # doc\n  b: 1\n  c: 2\n\n  d: 3\n") == ["line 6: d: 3"]


FREE_FORM = {"audit.spark.conf."}  # maps of any keys that have defaults


def _unknown_keys(given: Any, defaults: Any, path: str = "") -> list[str]:
    if not isinstance(given, dict) or not isinstance(defaults, dict) or not defaults:
        return []  # a leaf, a list or a free-form map ({} by default): anything goes
    if path in FREE_FORM:
        return []
    unknown = []
    for key, value in given.items():
        if key not in defaults:
            unknown.append(f"{path}{key}")
        else:
            unknown += _unknown_keys(value, defaults[key], f"{path}{key}.")
    return unknown


def test_production_values_use_only_keys_the_chart_knows() -> None:
    """Helm ignores a misspelt key silently; the example must not teach one."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    production = yaml.safe_load(PRODUCTION.read_text())
    assert _unknown_keys(production, defaults) == []
    assert _unknown_keys({"kafka": {"bootstrapServer": "x"}}, defaults) == ["kafka.bootstrapServer"]


def test_producers_keep_serving_while_they_leave_the_endpoints(rendered: Rendered) -> None:
    for component in ("producer", "control-plane"):
        (c,) = rendered.deployment(component)["spec"]["template"]["spec"]["containers"]
        command = c["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep" and int(command[1]) >= 1
        grace = rendered.deployment(component)["spec"]["template"]["spec"]
        assert grace["terminationGracePeriodSeconds"] > int(command[1])


class _StopAtPlan(Exception):
    """Raised where ``httpbus export`` first opens the metastore."""


def test_export_cronjobs_run_httpbus_export_per_topic_with_settings_from_the_values(
    helm: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """One CronJob per topic of export.topics; its command line runs the real CLI up to the
    plan, with the settings of the mounted file (Spark master and jars from the values)."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    r = Rendered("export", values, render(helm, *EXPORT_ON))
    jobs = [j for j in r.of_kind("CronJob") if "export" in j["metadata"]["name"]]
    assert [j["metadata"]["annotations"]["httpbus.io/export-topic"] for j in jobs] == [
        "shop/orders",
        "shop/payments",
    ]
    pod = jobs[1]["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    _assert_unprivileged("export", pod)
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:4] == ["httpbus", "export", "shop", "payments"], args
    assert args[args.index("--to") + 1] == "s3a://lake/bus/shop/payments"
    assert args[args.index("--since") + 1] == r.values["export"]["since"]
    config_path = Path(args[args.index("--config") + 1])
    configmap = r.one("ConfigMap", FULLNAME)
    file = tmp_path / config_path.name
    file.write_text(configmap["data"][config_path.name])
    env = _container_env(r, container, f"{FULLNAME}-export-1-29384551-qk5tz")
    assert "spark.driver.host=" in env["PYSPARK_SUBMIT_ARGS"]
    for key, value in env.items():
        clean_env.setenv(key, value)
    seen: list[tuple[ControlPlaneSettings, str, str]] = []

    async def plan(settings: ControlPlaneSettings, project: str, topic: str, since: int) -> None:
        seen.append((settings, project, topic))
        raise _StopAtPlan

    clean_env.setattr(export_cli, "_plan", plan)
    pod_args = [str(file) if a == str(config_path) else a for a in args[1:]]
    result = CliRunner().invoke(cli, pod_args)
    assert isinstance(result.exception, _StopAtPlan), f"{result.exit_code}: {result.output}"
    ((settings, project, topic),) = seen
    assert (project, topic) == ("shop", "payments")
    assert settings.spark_master == r.values["export"]["spark"]["master"]
    assert settings.spark_jars == r.values["export"]["spark"]["jars"]
    assert settings.default_cluster in settings.clusters


def test_migration_checks_run_the_check_per_topic_with_settings_from_the_values(
    helm: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """One single-pod Deployment per topic of migrationCheck.topics, replaced (never two
    checks of a topic at once); its command line runs the real CLI up to the Spark session,
    with the settings of the mounted file and the report database from the Secret."""
    on = ["--set", "migrationCheck.enabled=true", "--set", "migrationCheck.every=30"]
    on += ["--set", "migrationCheck.topics[0].project=shop,migrationCheck.topics[0].topic=orders"]
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    r = Rendered("migration-check", values, render(helm, *on, *AUDIT_ON[2:]))
    (check,) = [d for d in r.of_kind("Deployment") if "migration-check" in d["metadata"]["name"]]
    assert check["metadata"]["annotations"]["httpbus.io/migration-topic"] == "shop/orders"
    assert check["spec"]["replicas"] == 1 and check["spec"]["strategy"]["type"] == "Recreate"
    pod = check["spec"]["template"]["spec"]
    _assert_unprivileged("migration check", pod)
    (container,) = pod["containers"]
    args = container["args"]
    assert args[:6] == ["httpbus", "topic", "migration", "check", "shop", "orders"], args
    assert "--follow" in args and args[args.index("--every") + 1] == "30"
    config_path = Path(args[args.index("--config") + 1])
    file = tmp_path / config_path.name
    file.write_text(r.one("ConfigMap", FULLNAME)["data"][config_path.name])
    env = _container_env(r, container, f"{FULLNAME}-migration-check-0-6d9f7c-x2x5q")
    assert "spark.driver.host=" in env["PYSPARK_SUBMIT_ARGS"]
    for key, value in env.items():
        clean_env.setenv(key, value)
    seen: list[ControlPlaneSettings] = []

    def session(settings: ControlPlaneSettings, *args: Any, **kwargs: Any) -> None:
        seen.append(settings)
        raise _StopAtPlan

    clean_env.setattr(local, "spark_session", session)
    pod_args = [str(file) if a == str(config_path) else a for a in args[1:]]
    result = CliRunner().invoke(cli, pod_args)
    assert isinstance(result.exception, _StopAtPlan), f"{result.exit_code}: {result.output}"
    (settings,) = seen
    assert settings.spark_master == r.values["migrationCheck"]["spark"]["master"]
    assert settings.spark_jars == r.values["migrationCheck"]["spark"]["jars"]
    assert settings.database_url == AUDIT_DB  # where every window is kept
    # The control plane reads the windows back (and its users, roles, reports) from it too.
    (cp,) = r.deployment("control-plane")["spec"]["template"]["spec"]["containers"]
    assert _container_env(r, cp, "cp-0")["HTTPBUS_DATABASE_URL"] == AUDIT_DB
    bare = Rendered("defaults", values, render(helm))
    (cp,) = bare.deployment("control-plane")["spec"]["template"]["spec"]["containers"]
    assert "HTTPBUS_DATABASE_URL" not in _container_env(bare, cp, "cp-0")  # optional key
    assert settings.default_cluster in settings.clusters


def _assert_archive(archive: ArchiveStorage, values: dict[str, Any]) -> None:
    """The control plane's archive setting is the values' archive, its keys from the Secret
    the values name (the stand-in values of _container_env), never from the ConfigMap."""
    assert archive.s3_endpoint == (values["s3Endpoint"] or None)
    assert archive.s3_region == values["s3Region"]
    assert archive.s3_buckets == values["s3Buckets"]
    assert archive.local_root == (values["localRoot"] or None)
    assert (archive.interval_s, archive.grace_s) == (
        values["intervalSeconds"],
        values["graceSeconds"],
    )
    ref = values["s3CredentialsSecret"]
    if ref["name"]:
        assert archive.s3_access_key_id == f"from-{ref['name']}-{ref['accessKeyIdKey']}"
        secret = archive.s3_secret_access_key
        assert secret is not None
        assert secret.get_secret_value() == f"from-{ref['name']}-{ref['secretAccessKeyKey']}"
    else:
        assert archive.s3_access_key_id is None and archive.s3_secret_access_key is None


LOCAL_ARCHIVE = ["--set", "archive.localRoot=/srv/httpbus-archive"]
LOCAL_ARCHIVE += ["--set", "archive.localVolume.persistentVolumeClaim.claimName=bus-archive"]
LOCAL_ARCHIVE += ["--set", "archive.s3Buckets={lake,audit-lake}"]
LOCAL_ARCHIVE += ["--set", "archive.s3CredentialsSecret.name=s3-keys"]


def test_a_local_archive_is_a_shared_volume_mounted_at_the_local_root(
    helm: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """archive.localRoot is mounted from archive.localVolume into every control plane pod
    (the archiver writes, any replica lists), and no other service gets it or the S3 keys."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    values["archive"] |= {
        "localRoot": "/srv/httpbus-archive",
        "localVolume": {"persistentVolumeClaim": {"claimName": "bus-archive"}},
        "s3Buckets": ["lake", "audit-lake"],
    }
    values["archive"]["s3CredentialsSecret"]["name"] = "s3-keys"
    r = Rendered("local-archive", values, render(helm, *LOCAL_ARCHIVE))
    settings: Any = _load_service(r, "control-plane", tmp_path, clean_env)
    _assert_archive(settings.archive, values["archive"])
    spec = r.deployment("control-plane")["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    archive = volumes[mounts["/srv/httpbus-archive"]]
    assert archive["persistentVolumeClaim"] == {"claimName": "bus-archive"}
    assert "s3-keys" not in yaml.safe_dump(r.of_kind("ConfigMap"))
    for component in ("producer", "worker"):
        pod = r.deployment(component)["spec"]["template"]["spec"]
        assert "archive" not in {v["name"] for v in pod["volumes"]}, component
        env = {e["name"] for e in pod["containers"][0]["env"]}
        assert not any(name.startswith("HTTPBUS_ARCHIVE") for name in env), component
    # A local root with no volume would be a folder in the pod, lost with it: refused.
    done = run_helm(helm, "template", RELEASE, str(CHART), *LOCAL_ARCHIVE[:2])
    assert done.returncode != 0 and "archive.localRoot needs archive.localVolume" in done.stderr


def _relay_pod(r: Rendered, name: str) -> dict[str, Any]:
    dep = r.deployment(f"outbox-{name}")
    spec: dict[str, Any] = dep["spec"]["template"]["spec"]
    return spec


def test_outbox_relay_runs_one_pod_per_slot_with_settings_from_the_values(
    helm: str, tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    """The production example's relay: one Deployment of exactly one pod, replaced with
    Recreate (a Debezium engine runs once per slot), never autoscaled; its settings file loads
    with RelaySettings and holds the values, the password and the produce token come from the
    Secrets it names, the offsets file is on its PersistentVolumeClaim, and /metrics is the
    port the probes and the ServiceMonitor's Service use."""
    values = _deep_merge(
        yaml.safe_load((CHART / "values.yaml").read_text()), yaml.safe_load(PRODUCTION.read_text())
    )
    r = Rendered("production", values, render(helm, "-f", str(PRODUCTION)))
    (relay,) = _relays(values)
    dep = r.deployment("outbox-shop")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["metadata"]["annotations"]["httpbus.io/outbox-topic"] == "shop/orders"
    targets = [h["spec"]["scaleTargetRef"]["name"] for h in r.of_kind("HorizontalPodAutoscaler")]
    assert dep["metadata"]["name"] not in targets, "a relay is never scaled out"
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    for pdb in r.of_kind("PodDisruptionBudget"):
        assert not pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    pod = _relay_pod(r, "shop")
    _assert_unprivileged("outbox relay", pod)
    (container,) = pod["containers"]
    app = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"{values['image']['repository']}:0.1.0-outbox" != app
    args = container["args"]
    assert args[:2] == ["outbox", "--config"], args
    config_path = Path(args[2])
    mount = next(m for m in container["volumeMounts"] if m["mountPath"] == str(config_path.parent))
    volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
    configmap = r.one("ConfigMap", volume["configMap"]["name"])
    assert "database-password" not in yaml.safe_dump(configmap)
    file = tmp_path / config_path.name
    file.write_text(configmap["data"][config_path.name])
    for key, value in _container_env(r, container, f"{FULLNAME}-outbox-shop-7c9d-x2k4p").items():
        clean_env.setenv(key, value)
    settings = RelaySettings.load(file)
    assert (settings.name, settings.project, settings.topic) == ("shop", "shop", "orders")
    assert settings.source == relay["source"]
    assert (
        settings.producer_url
        == f"http://{FULLNAME}-producer:{values['producer']['service']['port']}"
    )
    db = relay["database"]
    assert (settings.database.host, settings.database.port, settings.database.dbname) == (
        db["host"],
        db["port"],
        db["dbname"],
    )
    assert (settings.database.slot, settings.database.publication) == (
        db["slot"],
        db["publication"],
    )
    assert (settings.database.user, settings.database.table) == (db["user"], db["table"])
    assert settings.database.password is not None
    assert settings.database.password.get_secret_value() == "from-shop-outbox-database-password"
    assert settings.produce_token is not None
    assert settings.produce_token.get_secret_value() == "from-shop-outbox-produce-token"
    assert settings.concurrency == relay["config"]["concurrency"]  # the relay's own config
    assert settings.offset_flush_s == values["outbox"]["config"]["offset_flush_s"]
    # The offsets file lies on the relay's claim, which outlives the release.
    offsets = next(
        m for m in container["volumeMounts"] if settings.offsets_file.is_relative_to(m["mountPath"])
    )
    claim = next(v for v in pod["volumes"] if v["name"] == offsets["name"])
    pvc = r.one("PersistentVolumeClaim", claim["persistentVolumeClaim"]["claimName"])
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert pvc["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pvc["spec"]["storageClassName"] == values["outbox"]["persistence"]["storageClass"]
    # Metrics: the port the relay serves is the one the probes and the Service ask.
    assert (settings.metrics_host, settings.metrics_port) == (
        "0.0.0.0",
        values["outbox"]["metricsPort"],
    )
    (port,) = container["ports"]
    assert port["containerPort"] == settings.metrics_port
    for probe in ("startupProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": port["name"]}
    svc = r.one("Service", f"{FULLNAME}-outbox-shop")
    assert svc["spec"]["selector"].items() <= pod_labels.items()
    assert svc["spec"]["ports"][0]["targetPort"] == port["name"]


def test_two_relays_are_two_deployments_each_of_one_pod(helm: str) -> None:
    """Relays of two databases: a Deployment, a claim and a settings file each."""
    flags = ["-f", str(PRODUCTION)]
    second = "outbox.relays[1]"
    flags += ["--set", f"{second}.name=billing,{second}.project=billing,{second}.topic=invoices"]
    flags += ["--set", f"{second}.database.host=billing-db,{second}.database.dbname=billing"]
    flags += ["--set", f"{second}.database.slot=billing_outbox"]
    flags += ["--set", f"{second}.database.passwordSecret.name=billing-outbox"]
    flags += ["--set", f"{second}.database.passwordSecret.key=pw"]
    flags += ["--set", f"{second}.produceTokenSecret.name=billing-outbox"]
    flags += ["--set", f"{second}.produceTokenSecret.key=token"]
    r = Rendered("two", {}, render(helm, *flags))
    for name in ("shop", "billing"):
        dep = r.deployment(f"outbox-{name}")
        assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
        r.one("PersistentVolumeClaim", f"{FULLNAME}-outbox-{name}")
    files = r.one("ConfigMap", f"{FULLNAME}-outbox")["data"]
    assert sorted(files) == ["billing.yaml", "shop.yaml"]
    billing = yaml.safe_load(files["billing.yaml"])
    assert billing["database"]["publication"] == "billing_outbox"  # the slot's name by default
    assert billing["source"] == "/billing/invoices"


def test_the_image_entrypoint_starts_the_outbox_relay() -> None:
    venv_bin = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["sh", str(ROOT / "scripts/tools/container/entrypoint.sh"), "outbox", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"},
    )
    assert done.returncode == 0, done.stderr
    assert "python -m outbox_relay" in done.stdout


def test_the_outbox_image_carries_debezium_and_a_jre_and_every_image_the_relay() -> None:
    """The outbox target installs httpbus[outbox] (Debezium's jars come in its wheel) beside a
    JRE; the build copies the outbox_relay package (the .dockerignore lets it in)."""
    stages = _dockerfile_stages()
    assert "COPY outbox_relay ./outbox_relay" in stages["build"]
    assert '"$wheel[outbox]"' in stages["build-outbox"]
    assert "openjdk-17-jre-headless" in stages["outbox"]
    assert "COPY --from=build-outbox /opt/httpbus /opt/httpbus" in stages["outbox"]
    assert "[outbox]" not in stages[""] and "openjdk" not in stages[""]
    assert "!outbox_relay/" in (ROOT / ".dockerignore").read_text().splitlines()

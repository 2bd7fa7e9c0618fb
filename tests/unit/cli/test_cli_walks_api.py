"""The CLI reaches every operation of the control plane's API (issue 39 item 4).

The test builds the control plane's OpenAPI document (``create_app`` on the embedded
backends) and the CLI's command tree (the Click group Typer builds from ``cli.cli``). It then
runs every API command of the tree — every command registered by ``cli.kit.command`` — with
the arguments of :data:`EXAMPLES` against a recording client: ``cli.kit.run`` opens a
:class:`Recorder` instead of the HTTP client, which writes down each request (method and
path) and answers with a :class:`Anything`. Nobody keeps a table of which command calls
which route: what a command reaches is what it sent, matched to the document's path
templates. So the test fails:

- naming every API operation (method + path template) that no command reached;
- naming every input of a reached operation (a query parameter, a field of its JSON body or
  of an object in it, as ``endpoint.timeout_ms``) that no command sent, but for the fields
  of :data:`SET_ELSEWHERE`;
- naming every request a command sent that matches no operation of the document (a route
  renamed or removed under the CLI);
- naming an API command that has no example here, or whose examples sent nothing (a new
  command is noticed the day it is added);
- naming a command outside the kit that is not a known local job or service starter
  (:data:`NOT_API_CLIENTS`), so an API client cannot slip past the kit and this walk.

Operations for browsers or machines are left out by one rule, :func:`for_browsers_or_machines`:
the web UI (``/ui``), the probes and metrics (``/healthz``, ``/readyz``, ``/metrics``),
anything under ``/.well-known/`` (the JWKS that endpoints fetch), and login and session
routes (``/login``, ``/logout``, ``/session``, also under ``/v1``). They are not for people
at a terminal; everything else is.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
import typer
from typer.testing import CliRunner

from cli import cli, kit
from control_plane.app import create_app
from control_plane.client import JSON, AdminClient, Unreachable
from control_plane.settings import ControlPlaneSettings
from metastore.config import EmbeddedMetaStoreConfig
from segments.config import EmbeddedClusterConfig

HTTP_METHODS = ("get", "post", "put", "patch", "delete")

# Commands that are not clients of the control plane's API, and why.
NOT_API_CLIENTS = {
    "dev": "starts the services",
    "run": "starts the services",
    "outbox run": "starts the outbox relay",
    "produce": "a client of the producer service, not of the control plane",
    "export": "a local Spark job",
    "audit run": "a local Spark job",
    "audit job": "a local Spark job",
    "audit load": "a local job writing the report database",
    "db upgrade": "migrates the report database",
    "db downgrade": "migrates the report database",
    "db current": "reads the report database's revision",
    "topic migration check": "a local Spark job",
}


@dataclass(frozen=True)
class Operation:
    method: str
    template: str

    def __str__(self) -> str:
        return f"{self.method} {self.template}"


# How each API command is run here: one argument list a line, after the command's name.
# A command with flags that reach other operations has a line for each.
S = ("shop", "s1")  # project, subscription
PAGING = [
    ("--search", "x", "--cursor", "c", "--limit", "5"),
    ("--all",),
    ("--offset", "10"),
]  # the list commands' options
T = ("shop", "orders")  # project, topic
SUB = ("--topic", "orders", "--endpoint", "http://127.0.0.1:9/hook")
ENDPOINT = (
    *("--endpoint", "http://h/", "--timeout-ms", "500", "--method", "PUT"),
    *("--header", "X-A=1", "--disable-after", "1h"),
)
RETRY = tuple(
    f"--retry={key}"
    for key in (
        "backoff=linear",
        "max_attempts=3",
        "initial_delay_ms=10",
        "max_delay_ms=100",
        "multiplier=3",
        "jitter=0",
        "retry_4xx=true",
        "retry_statuses=[500]",
        "retry_timeouts=false",
        "retry_connection_errors=false",
        "delay_levels_ms=[1000]",
    )
)
CIRCUIT = tuple(
    f"--circuit={key}"
    for key in (
        "enabled=true",
        "failure_rate_threshold=0.3",
        "window_seconds=10",
        "min_calls=5",
        "cooldown_seconds=5",
        "probe_per_second=1",
        "floor_per_second=2",
    )
)
BATCH = ("--batch", "10", "--batch-max-bytes", "1000", "--batch-max-wait-ms", "50")
AUTH = (  # the files are written by _walk
    ("--auth", "jwt", "--audience", "a"),
    ("--auth", "oauth2_client_credentials", "--token-url", "https://t/", "--client-id", "i"),
    ("--auth", "oauth2_client_credentials", "--client-secret-file", "pem", "--scope", "s"),
    ("--auth", "mtls", "--client-cert", "pem", "--client-key", "pem", "--ca", "pem"),
)
EXAMPLES: dict[str, list[tuple[str, ...]]] = {
    "tail": [(*S, "--count", "1")],
    "trace": [(*T, "m1"), (*T, "--group", "g1")],
    "whoami": [()],
    "project create": [("shop", "--description", "d", "--notification-url", "https://e.com/n")],
    "project list": [
        (),
        ("--search", "x", "--cursor", "c", "--limit", "5"),
        ("--all",),
        ("--offset", "10"),
    ],
    "project show": [("shop",)],
    "project update": [("shop", "--description", "d", "--notification-url", "https://e.com/n")],
    "project delete": [("shop", "--yes")],
    "project quota get": [("shop",)],
    "project quota set": [
        ("shop", "--messages-per-second", "5", "--bytes-per-second", "2048"),
        ("shop", "--max-topics", "3", "--max-subscriptions", "4"),
    ],
    "topic create": [
        (*T, "--cluster", "embedded", "--retention-hours", "24", "--dedupe-window", "1h"),
        (*T, "--archive-to", "s3://b/p", "--archive-every", "2h", "--archive-keep-days", "7"),
        (*T, "--failover-cluster", "kafka-main", "--cloudevents-group-attribute", "subject"),
        (*T, "--description", "d", "--max-message-bytes", "100", "--max-qps", "5"),
        (
            *T,
            "--max-bytes-per-second",
            "2048",
            "--failover-cluster",
            "k",
            "--failover-mode",
            "ordered",
        ),
        (*T, "--cluster", "legacy", "--external-topic", "orders-v1", "--partitions", "12"),
    ],
    "topic list": [("shop",), *[("shop", *a) for a in PAGING]],
    "topic show": [T],
    "topic migrate": [(*T, "--cluster", "embedded", "--partitions", "2", "--interval", "0.05")],
    "topic update": [
        (*T, "--retention", "36h", "--max-message-bytes", "100", "--max-qps", "5"),
        (*T, "--description", "d", "--dedupe-window", "1h", "--failover-cluster", "kafka-main"),
        (*T, "--cloudevents-group-attribute", "subject", "--max-bytes-per-second", "2048"),
        (*T, "--failover-cluster", "k", "--failover-mode", "available"),
        (*T, "--archive-to", "s3://b/p", "--archive-every", "1h", "--archive-keep-days", "30"),
        (*T, "--no-archive"),
    ],
    "topic delete": [(*T, "--yes"), (*T, "--force", "--yes")],
    "topic cutover status": [T],
    "topic cutover abort": [T],
    "topic failover status": [T],
    "topic archive list": [T],
    "topic migration start": [(*T, "--cluster", "kafka-main", "--partitions", "2")],
    "topic migration status": [T, (*T, "--history", "--since", "2026-01-01T00:00:00Z")],
    "topic migration abandon": [T],
    "topic schema set": [(*T, "schema.json", "--compatibility", "backward")],  # by _walk
    "topic schema get": [T, (*T, "--version", "1")],
    "topic schema versions": [T],
    "topic schema delete": [(*T, "--yes")],
    "topic grant add": [(*T, "other")],
    "topic grant list": [T, *[(*T, *a) for a in PAGING]],
    "topic grant remove": [(*T, "other", "--yes")],
    "sub create": [
        (*S, *SUB, "--filter", "true", "--max-in-flight", "2", "--rate-limit", "5"),
        (*S, *SUB, "--delay-ms", "10", "--description", "d", "--paused", "--shards", "2"),
        (*S, *SUB, "--delivery-format", "raw", "--signing-secret-file", "secret"),
        (*S, *SUB, *ENDPOINT),
        (*S, *SUB, *RETRY),
        (*S, *SUB, *CIRCUIT),
        (*S, *SUB, *BATCH),
        *((*S, *SUB, *auth) for auth in AUTH),
    ],
    "sub list": [("shop",), *[("shop", *a) for a in PAGING]],
    "sub show": [S],
    "sub update": [
        (*S, "--filter", "true", "--max-in-flight", "2", "--rate-limit", "5", "--no-dlq"),
        (*S, "--delay-ms", "10", "--description", "d", "--delivery-format", "raw"),
        (*S, "--endpoint", "http://h/", *ENDPOINT[2:]),
        (*S, *RETRY),
        (*S, *CIRCUIT),
        (*S, *BATCH),
        *((*S, *auth) for auth in AUTH),
    ],
    "sub delete": [(*S, "--yes")],
    "sub enable": [S],
    "sub test-event": [S],
    "sub pause": [S],
    "sub resume": [S],
    "sub seek": [(*S, "--to", "earliest"), (*S, "--timestamp", "2026-01-31T12:00:00Z")],
    "sub rotate-secret": [(*S, "--secret", "whsec_x", "--overlap-s", "60")],
    "sub reveal-secret": [S],
    "signing-keys list": [()],
    "signing-keys rotate": [
        (
            "--lead-s",
            "60",
        )
    ],
    "token create": [("shop",)],
    "token list": [("shop",), *[("shop", *a) for a in PAGING]],
    "token revoke": [("shop", "t1", "--yes")],
    "user create": [("ann", "--password-stdin")],
    "user list": [(), *PAGING],
    "user show": [("ann",)],
    "user grant": [("ann", "admin")],
    "user revoke": [("ann", "admin")],
    "user delete": [("ann", "--yes")],
    "user password": [("ann", "--password-stdin")],
    "user token create": [("ann",), ("--role", "admin")],
    "user token list": [(), ("ann",), *[("ann", *a) for a in PAGING]],
    "user token revoke": [("t1", "--yes")],
    "dlq list": [
        (*S, "--group", "g", "--status", "500", "--cursor", "c"),
        (*S, "--failed-after", "2026-01-01T00:00:00Z", "--failed-before", "now"),
        (*S, "--kind", "heads"),
    ],
    "dlq unsideline": [(*S, "--id", "m1"), (*S, "--group", "g"), (*S, "--before", "now")],
    "dlq purge": [
        (*S, "--all", "--yes"),
        (*S, "--id", "m1", "--yes"),
        (*S, "--group", "g", "--yes"),
        (*S, "--before", "now", "--yes"),
    ],
    "audit runs": [(), ("--limit", "5", "--cursor", "c")],
    "audit show": [("1",)],
    "audit hourly": [("--project", "shop", "--subscription", "s1", "--since", "2026-01-01T00:00Z")],
    "audit cutovers": [(), ("--limit", "5", "--cursor", "c")],
    "overview": [(), ("--watch", "--count", "1", "--interval", "0.05")],
    "search": [("orders",)],
    "catalog": [(), ("--search", "ord", "--limit", "5", "--cursor", "c")],
    "catalog show": [("shop/orders",)],
    "project notify": [
        ("shop", "--notification-url", "https://e.com/n", "--event", "all"),
        ("shop", "--failing-after", "5m", "--interval", "10m", "--no-notification-url"),
    ],
    "sub resend": [(*S, "m1")],
    "sub recover": [(*S, "--since", "2026-01-01T00:00:00Z", "--until", "now")],
    "sub replay": [(*S, "--since", "2026-01-01T00:00:00Z", "--rate", "50", "--no-wait")],
    "sub replay-status": [S],
    "sub status": [S, (*S, "--range", "10m")],
    "dlq summary": [S],
    "topic grant-request create": [(*T, "--project", "other", "--reason", "r")],
    "topic grant-request list": [
        T,
        (*T, "--state", "pending"),
        *[(*T, "--state", "pending", *a) for a in PAGING],
    ],
    "topic grant-request approve": [(*T, "other", "--note", "n")],
    "topic grant-request refuse": [(*T, "other", "--note", "n")],
}

# Fields an operation takes that the CLI sets through another operation: an update sends
# them back as it read them.
SET_ELSEWHERE = {
    Operation("POST", "/v1/projects"): {
        f"notifications{leaf}": "project notify, once the project exists (its PUT sends them)"
        for leaf in ("", ".events", ".failing_after_s", ".interval_s")
    },
    Operation("PUT", "/v1/projects/{project}/subscriptions/{subscription}"): {
        "paused": "sub pause|resume (the stop and start routes)",
        "signing_secret": "sub rotate-secret (with an overlap)",
    },
}


def for_browsers_or_machines(path: str) -> bool:
    """The rule that leaves an operation out of the walk: the web UI, probes and metrics,
    ``/.well-known/`` documents, login and session routes."""
    if path.startswith(("/ui/", "/.well-known/")) or path == "/ui":
        return True
    if path in ("/healthz", "/readyz", "/metrics"):
        return True
    return bool(re.search(r"/(login|logout|session)(/|$)", path))


class Anything(dict[str, Any]):
    """An answer to any request: every key is another :class:`Anything` (so a command reads
    what it wants and goes on to its next request), iterating it gives nothing."""

    def __missing__(self, key: str) -> Anything:
        return Anything()


@dataclass(frozen=True)
class Sent:
    """One request a command sent: the names of its query parameters and of its JSON
    body's top-level fields (those the real client would send: no None, no empty text)."""

    method: str
    path: str
    inputs: frozenset[str]


def _inputs(params: Any, body: JSON) -> frozenset[str]:
    pairs = params.items() if isinstance(params, dict) else params or []
    names = {k for k, v in pairs if v is not None and v != ""}
    for key, value in (body if isinstance(body, dict) else {}).items():
        names.add(key)
        if isinstance(value, dict):
            names.update(f"{key}.{inner}" for inner in value)
    return frozenset(names)


@dataclass
class Recorder:
    """Stands in for :class:`AdminClient` in ``cli.kit.run``: records every request. A
    request the command already sent (a poll, a batch loop) ends the command (exit 6)."""

    sent: list[Sent] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)

    def client(self, base_url: str, token: str) -> AdminClient:
        recorder = self

        class Recording(AdminClient):
            def __init__(self) -> None:  # no HTTP client: nothing leaves the process
                pass

            async def aclose(self) -> None:
                pass

            async def request(
                self, method: str, url: str, *, json: JSON = None, params: Any = None
            ) -> JSON:
                key = f"{method} {url} {params!r} {json!r}"
                if key in recorder.seen:
                    raise Unreachable(0, "unreachable", "the recorder answers each request once")
                recorder.seen.add(key)
                # The server matches the decoded path (``secret%3Arotate`` is ``secret:rotate``).
                where = unquote(url.split("?")[0])
                recorder.sent.append(Sent(method.upper(), where, _inputs(params, json)))
                return Anything()

        return Recording()


def _objects(schema: dict[str, Any], document: dict[str, Any]) -> list[dict[str, Any]]:
    """The object schemas ``schema`` may be: a ``$ref`` followed, every variant of an
    ``anyOf``, ``oneOf`` or ``allOf`` (an optional object, a union of auth modes)."""
    if "$ref" in schema:
        return _objects(
            document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]], document
        )
    found = [schema] if "properties" in schema else []
    for key in ("anyOf", "oneOf", "allOf"):
        for variant in schema.get(key, []):
            found += _objects(variant, document)
    return found


def _body_fields(spec: dict[str, Any], document: dict[str, Any]) -> set[str]:
    """The fields of an operation's JSON body: its top-level properties, and as
    ``field.inner`` the properties of those that are objects (``endpoint.timeout_ms``)."""
    body = spec.get("requestBody", {}).get("content", {}).get("application/json", {})
    fields: set[str] = set()
    for top in _objects(body.get("schema", {}), document):
        for name, prop in top["properties"].items():
            fields.add(name)
            for inner in _objects(prop, document):
                fields.update(f"{name}.{key}" for key in inner["properties"])
    return fields


@pytest.fixture(scope="module")
def document(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("cp")
    settings = ControlPlaneSettings(
        admin_token="walk-admin-token-0123456789",
        metastore=EmbeddedMetaStoreConfig(path=str(data / "meta.db")),
        clusters={"embedded": EmbeddedClusterConfig(path=str(data / "segments.db"))},
    )
    built: dict[str, Any] = create_app(settings).openapi()
    return built


@pytest.fixture(scope="module")
def inputs(document: dict[str, Any]) -> dict[Operation, set[str]]:
    """Every operation of the document and what it takes: its query parameters and its
    body's top-level fields."""
    return {
        Operation(method.upper(), template): {
            p["name"] for p in spec.get("parameters", []) if p["in"] == "query"
        }
        | _body_fields(spec, document)
        for template, item in document["paths"].items()
        for method, spec in item.items()
        if method in HTTP_METHODS
    }


@pytest.fixture(scope="module")
def operations(inputs: dict[Operation, set[str]]) -> list[Operation]:
    return list(inputs)


def _leaves(command: Any, names: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    if hasattr(command, "commands"):
        if names and kit.is_kit_command(command.callback):  # the group's own (default) command
            yield " ".join(names), command
        for name in list(command.commands):
            yield from _leaves(command.commands[name], (*names, name))
    else:
        yield " ".join(names), command


@pytest.fixture(scope="module")
def commands() -> dict[str, Any]:
    return dict(_leaves(typer.main.get_command(cli)))


def _pattern(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{[^}]+\})", template)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts))


def _match(method: str, url: str, operations: list[Operation]) -> Operation | None:
    found = [o for o in operations if o.method == method and _pattern(o.template).fullmatch(url)]
    # A literal segment beats a parameter (``.../schema/versions`` before ``{version}``).
    return max(found, key=lambda o: len(re.sub(r"\{[^}]+\}", "", o.template)), default=None)


def _walk(
    commands: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> dict[str, list[Sent]]:
    """Every API command run with its examples: the requests each sent."""
    sent: dict[str, list[Sent]] = {}
    env = {"HTTPBUS_URL": "http://cli-walk.invalid", "HTTPBUS_ADMIN_TOKEN": "t", "COLUMNS": "200"}
    monkeypatch.chdir(tmp_path)
    (tmp_path / "schema.json").write_text('{"type": "object"}')
    (tmp_path / "pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "secret").write_text("whsec_c2VjcmV0LW9mLXRoZS13YWxrLTMyLWJ5dGVzLWxvbmc=")
    for name, command in commands.items():
        if not kit.is_kit_command(command.callback):
            continue
        for args in EXAMPLES.get(name, []):
            recorder = Recorder()
            monkeypatch.setattr(kit, "AdminClient", recorder.client)
            result = CliRunner().invoke(
                cli, [*name.split(), *args], env=env, input="a-password-of-the-walk\n"
            )
            usage = result.stderr.strip().splitlines()[-2:] if result.exit_code == 2 else ""
            assert result.exit_code != 2, f"the example {name} {args} is refused: {usage}"
            sent.setdefault(name, []).extend(recorder.sent)
    return sent


def test_every_api_operation_is_reached_by_a_cli_command(
    inputs: dict[Operation, set[str]],
    commands: dict[str, Any],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    problems: list[str] = []
    outside_kit = sorted(n for n, c in commands.items() if not kit.is_kit_command(c.callback))
    if outside_kit != sorted(NOT_API_CLIENTS):
        problems.append(
            "commands outside cli.kit must be the local jobs and service starters of "
            f"NOT_API_CLIENTS (declare API clients with cli.kit.command): {outside_kit}"
        )
    api_commands = sorted(set(commands) - set(NOT_API_CLIENTS))
    if without_example := [n for n in api_commands if n not in EXAMPLES]:
        problems.append(f"API commands with no example in EXAMPLES: {without_example}")
    if stale := sorted(set(EXAMPLES) - set(api_commands)):
        problems.append(f"EXAMPLES names commands that are not API commands: {stale}")

    sent = _walk(commands, monkeypatch, tmp_path)
    if silent := [n for n in api_commands if n in EXAMPLES and not sent.get(n)]:
        problems.append(f"API commands whose examples sent no request: {silent}")

    reached: dict[Operation, set[str]] = {}
    for name, requests in sent.items():
        for request in requests:
            operation = _match(request.method, request.path, list(inputs))
            if operation is None:
                problems.append(
                    f"{name} sent {request.method} {request.path}, no operation of the OpenAPI"
                )
            else:
                reached.setdefault(operation, set()).update(request.inputs)
    for operation, takes in inputs.items():
        if for_browsers_or_machines(operation.template):
            continue
        if operation not in reached:
            problems.append(f"no CLI command reaches {operation}")
        elif unsent := sorted(takes - reached[operation] - set(SET_ELSEWHERE.get(operation, {}))):
            problems.append(f"no CLI command sends {', '.join(unsent)} to {operation}")
    assert not problems, "\n".join(problems)


def test_the_rule_leaves_out_only_browser_and_machine_routes(
    operations: list[Operation],
) -> None:
    left_out = sorted({o.template for o in operations if for_browsers_or_machines(o.template)})
    assert left_out == ["/.well-known/jwks.json", "/healthz", "/metrics", "/readyz"]
    assert not for_browsers_or_machines("/v1/projects/{project}/sessions-report")
    assert for_browsers_or_machines("/ui/projects") and for_browsers_or_machines("/v1/login")


def test_a_request_to_an_unknown_route_matches_nothing(operations: list[Operation]) -> None:
    assert _match("GET", "/v1/projects/shop/nothing-here", operations) is None
    assert _match("PATCH", "/v1/projects/shop", operations) is None
    found = _match("GET", "/v1/projects/shop/topics/orders/schema/versions", operations)
    assert found == Operation("GET", "/v1/projects/{project}/topics/{topic}/schema/versions")

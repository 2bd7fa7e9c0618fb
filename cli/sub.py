"""``httpbus sub``: create, list, show, update, delete, status, pause, resume, enable, seek
subscriptions, send them a test event, resend messages to one and recover its DLQ between two
times; rotate and reveal their signing secrets.

``create`` and ``update`` set the endpoint authentication (``auth``, docs/receiving.md):
``--auth jwt [--audience A]``, ``--auth oauth2_client_credentials --token-url U --client-id I
--client-secret-file F [--scope S] [--audience A]``, ``--auth mtls --client-cert F --client-key
F [--ca F]`` (or ``--ca F`` alone), ``--auth none``. On ``update``, the auth flags without
``--auth`` change the auth in force; a write-only value not given is kept."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from cli import sub_replay
from cli.dlq import batches, dlq_line, time_option
from cli.kit import (
    EXIT_USAGE,
    Call,
    Columns,
    Output,
    Paging,
    Project,
    Yes,
    command,
    duration_ms,
    fail,
    get,
    listing,
    post,
    progress,
    removal,
    rfc3339,
    table,
)
from cli.kit import Subscription as Name
from cli.kit import update as updated
from control_plane.client import SETTINGS_FIELDS, AdminClient, path, update_body

app = typer.Typer(
    help="Subscriptions: create, list, show, update, delete, status, pause, resume, enable, "
    "seek, test-event, resend, recover, rotate-secret, reveal-secret.",
    no_args_is_help=True,
)

Backoff = Literal["fixed", "linear", "exponential"]


Format = Annotated[
    Literal["raw", "cloudevents-binary", "cloudevents-structured"] | None,
    typer.Option(
        "--delivery-format",
        help="raw (the payload as produced), cloudevents-binary (ce- headers) or "
        "cloudevents-structured (application/cloudevents+json); docs/receiving.md.",
    ),
]


def _file(help: str) -> Any:
    """An option naming an existing file, which the command reads."""
    return typer.Option(exists=True, dir_okay=False, help=help)


TimeoutMs = Annotated[
    int | None,
    typer.Option(min=100, max=900_000, help="How long one delivery may take (ms, up to 15 min)."),
]
Method = Annotated[
    Literal["POST", "PUT"] | None, typer.Option(help="HTTP method of deliveries (default POST).")
]
Headers = Annotated[
    list[str] | None,
    typer.Option(
        "--header",
        help="NAME=VALUE sent with every delivery (repeat). Credentials (Authorization, "
        "*-Token, *-Key…) are shown as ******** afterwards; reveal-secret shows them.",
    ),
]
DisableAfter = Annotated[
    str | None,
    typer.Option(
        help="Disable the subscription once every attempt has failed this long (90m, 24h, "
        "7d; default 24h), or never."
    ),
]
_SECRET_OF = {"oauth2_client_credentials": "client_secret", "mtls": "client_key"}
MASK = "********"  # what reads show of a write-only value (core.secret_headers)


@dataclass(frozen=True)
class Retrying:
    """The retry policy and circuit breaker options of ``create`` and ``update`` (an option
    group of the kit)."""

    max_attempts: Annotated[int | None, typer.Option(min=1, help="Delivery attempts.")] = None
    backoff: Annotated[Backoff | None, typer.Option(help="Retry backoff.")] = None
    retry: Annotated[
        list[str] | None,
        typer.Option(
            "--retry",
            help="KEY=VALUE of the retry policy (repeat), the value JSON or text: "
            "initial_delay_ms=500, max_delay_ms, multiplier, jitter, retry_4xx=true, "
            "'retry_statuses=[500,503]', retry_timeouts, retry_connection_errors, "
            "'delay_levels_ms=[1000,60000]' (docs/retries.md).",
        ),
    ] = None
    circuit: Annotated[
        list[str] | None,
        typer.Option(
            "--circuit",
            help="KEY=VALUE of the circuit breaker (repeat): enabled=false, "
            "failure_rate_threshold=0.3, window_seconds, min_calls, cooldown_seconds, "
            "probe_per_second, floor_per_second (docs/circuit-breaking.md).",
        ),
    ] = None

    def retry_policy(self) -> dict[str, Any]:
        """The retry policy fields the options give: ``--retry``'s, then the two of their
        own."""
        given = _given(max_attempts=self.max_attempts, backoff=self.backoff)
        return {**_policy("--retry", self.retry), **given}

    def circuit_breaker(self) -> dict[str, Any]:
        """The circuit breaker fields ``--circuit`` gives."""
        return _policy("--circuit", self.circuit)


@dataclass(frozen=True)
class Batching:
    """The batch options of ``create`` and ``update`` (an option group of the kit)."""

    batch: Annotated[
        int | None,
        typer.Option(
            "--batch", min=1, max=1_000, help="Deliver up to this many messages per request."
        ),
    ] = None
    batch_max_bytes: Annotated[
        int | None, typer.Option(min=1, help="Batches: the most payload bytes per request.")
    ] = None
    batch_max_wait_ms: Annotated[
        int | None,
        typer.Option(min=0, max=60_000, help="Batches: send a batch this long after its first."),
    ] = None

    def given(self) -> dict[str, Any]:
        """The batch fields the options give, None values left out."""
        return _given(
            max_messages=self.batch,
            max_bytes=self.batch_max_bytes,
            max_wait_ms=self.batch_max_wait_ms,
        )


@dataclass(frozen=True)
class EndpointAuth:
    """The endpoint authentication options of ``create`` and ``update`` (an option group
    of the kit): ``--auth`` and the fields of each kind."""

    auth: Annotated[
        Literal["none", "jwt", "oauth2_client_credentials", "mtls"] | None,
        typer.Option(
            "--auth",
            help="How deliveries authenticate: none, jwt (a JWT signed by httpbus per delivery), "
            "oauth2_client_credentials (a bearer token from --token-url), mtls (a client "
            "certificate); docs/receiving.md.",
        ),
    ] = None
    audience: Annotated[
        str | None,
        typer.Option(
            help="jwt: the token's aud (default: the endpoint URL); oauth2: the token "
            "request's audience."
        ),
    ] = None
    token_url: Annotated[str | None, typer.Option(help="oauth2: the token endpoint.")] = None
    client_id: Annotated[str | None, typer.Option(help="oauth2: the client id.")] = None
    client_secret_file: Annotated[
        Path | None, _file("oauth2: a file holding the client secret (write-only, never shown).")
    ] = None
    scope: Annotated[str | None, typer.Option(help="oauth2: the scope asked for.")] = None
    client_cert: Annotated[Path | None, _file("mtls: the client certificate (PEM).")] = None
    client_key: Annotated[Path | None, _file("mtls: its private key (PEM, write-only).")] = None
    ca: Annotated[
        Path | None, _file("mtls: CA bundle the endpoint's certificate must chain to.")
    ] = None

    def changes(self) -> dict[str, Any]:
        """The auth fields the options give (files read), None values left out."""
        text = {
            "client_secret": self.client_secret_file,
            "client_cert": self.client_cert,
            "client_key": self.client_key,
            "ca": self.ca,
        }
        found: dict[str, Any] = {
            k: p.read_text().strip() if k == "client_secret" else p.read_text()
            for k, p in text.items()
            if p is not None
        }
        given = _given(
            audience=self.audience,
            token_url=self.token_url,
            client_id=self.client_id,
            scope=self.scope,
        )
        return found | given


def _auth_body(
    kind: str | None, changes: dict[str, Any], current: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The ``auth`` to send: ``kind`` with ``changes`` (on the auth in force when it is of
    that kind, so a write-only value not given is kept: it goes back masked), or None when
    the flags change nothing."""
    current = current or {"type": "none"}
    if kind is None and not changes:
        return None
    if kind is None:
        kind = current["type"]
        if kind == "none":
            if not {"client_cert", "ca"} & set(changes):
                raise fail("give --auth with the auth options (see --help)", EXIT_USAGE)
            kind = "mtls"
    if kind == "none":
        if changes:
            raise fail("--auth none takes no other auth option", EXIT_USAGE)
        return {"type": "none"}
    base = {k: v for k, v in current.items() if v is not None} if current["type"] == kind else {}
    secret = _SECRET_OF.get(kind)
    if secret and current["type"] == kind and current.get(secret) == MASK:
        base[secret] = MASK  # kept by the server
    allowed = {
        "jwt": {"audience"},
        "oauth2_client_credentials": {
            "token_url",
            "client_id",
            "client_secret",
            "scope",
            "audience",
        },
        "mtls": {"client_cert", "client_key", "ca"},
    }[kind]
    stray = sorted(set(changes) - allowed)
    if stray:
        flags = ", ".join("--" + s.replace("_", "-") for s in stray)
        raise fail(f"--auth {kind} does not take {flags}", EXIT_USAGE)
    return {**base, **changes, "type": kind}


def _headers(given: list[str]) -> dict[str, str]:
    """``NAME=VALUE`` options as a dict; a usage error names one without ``=``."""
    found: dict[str, str] = {}
    for item in given:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise fail(f"--header {item!r}: give NAME=VALUE", EXIT_USAGE)
        found[name.strip()] = value
    return found


def _policy(option: str, given: list[str] | None) -> dict[str, Any]:
    """``KEY=VALUE`` options of a policy: each value read as JSON (a number, true, false,
    null, a list), else kept as text. The API checks the keys and values (422 naming the
    field)."""
    found: dict[str, Any] = {}
    for item in given or []:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise fail(f"{option} {item!r}: give KEY=VALUE", EXIT_USAGE)
        try:
            found[key.strip()] = json.loads(text)
        except ValueError:
            found[key.strip()] = text
    return found


def _disable_after_s(text: str) -> int | None:
    """``never`` (None) or a duration in whole seconds."""
    if text.strip().lower() == "never":
        return None
    try:
        seconds = duration_ms(text) // 1000
    except typer.BadParameter as exc:
        raise fail(f"--disable-after: {exc} (or never)", EXIT_USAGE) from None
    if seconds < 1:
        raise fail(f"--disable-after {text!r}: at least one second", EXIT_USAGE)
    return seconds


def _endpoint(
    *,
    url: str | None,
    timeout_ms: int | None,
    method: str | None,
    disable_after: str | None,
) -> dict[str, Any]:
    """The endpoint fields the flags give (None values left out)."""
    found = _given(url=url, timeout_ms=timeout_ms, method=method)
    if disable_after is not None:
        found["disable_after_s"] = _disable_after_s(disable_after)
    return found


def _subs(project: str, *rest: str) -> str:
    return path("v1", "projects", project, "subscriptions", *rest)


def _state(sub: dict[str, Any]) -> str:
    """disabled, paused, then an open or half-open circuit (a list row carries it), else
    active: "active" must not hide an endpoint that fails."""
    if sub.get("disabled"):
        return "disabled"
    if sub.get("paused"):
        return "paused"
    circuit = sub.get("circuit")
    if circuit in ("open", "half_open"):
        return f"circuit {circuit.replace('_', '-')}"
    return "active"


def _created(project: str, name: str, sub: dict[str, Any]) -> str:
    return (
        f"created subscription {project}/{name} → {sub['endpoint']['url']}\n"
        f"signing secret (shown this once): {sub['signing_secret']}"
    )


@command(app)
def create(
    project: Project,
    name: Name,
    *,
    topic: Annotated[str, typer.Option(help="Topic, or project/topic.")],
    endpoint: Annotated[str, typer.Option(help="Webhook URL (http or https).")],
    timeout_ms: TimeoutMs = None,
    method: Method = None,
    header: Headers = None,
    disable_after: DisableAfter = None,
    signing_secret_file: Annotated[
        Path | None, _file("A file holding the signing secret (whsec_…); generated when absent.")
    ] = None,
    filter_: Annotated[str | None, typer.Option("--filter", help="CEL filter expression.")] = None,
    retrying: Retrying,
    max_in_flight: Annotated[int | None, typer.Option(min=1, help="In-flight limit.")] = None,
    rate_limit: Annotated[float | None, typer.Option(help="Messages per second.")] = None,
    delay_ms: Annotated[int | None, typer.Option(min=0, help="Hold every message.")] = None,
    dlq: Annotated[bool, typer.Option(help="Dead-letter what fails for good.")] = True,
    description: Annotated[str | None, typer.Option(help="What the subscription is for.")] = None,
    paused: Annotated[
        bool, typer.Option("--paused", help="Create it paused (sub resume starts it).")
    ] = False,
    shards: Annotated[
        int | None, typer.Option(min=1, max=64, help="Workers sharing the delivery (fixed).")
    ] = None,
    batching: Batching,
    delivery_format: Format = None,
    endpoint_auth: EndpointAuth,
    start: Annotated[
        str,
        typer.Option(
            help="Where it begins: latest (only what is published from now on), earliest "
            "(the whole retained backlog) or an RFC 3339 time."
        ),
    ] = "latest",
) -> Call:
    """Create a subscription that pushes a topic's messages to an endpoint."""
    target = _endpoint(
        url=endpoint, timeout_ms=timeout_ms, method=method, disable_after=disable_after
    )
    if header:
        target["headers"] = _headers(header)
    body: dict[str, Any] = {"name": name, "topic": topic, "endpoint": target}
    if signing_secret_file is not None:
        body["signing_secret"] = signing_secret_file.read_text().strip()
    if start not in ("latest", "earliest"):
        start = rfc3339(start, "--start", " (nor latest or earliest)")
    body["start"] = start
    if retry_policy := retrying.retry_policy():
        body["retry"] = retry_policy
    if circuit_breaker := retrying.circuit_breaker():
        body["circuit_breaker"] = circuit_breaker
    body.update(
        _given(
            filter=filter_,
            max_in_flight=max_in_flight,
            rate_limit_per_second=rate_limit,
            delay_ms=delay_ms,
            shards=shards,
            delivery_format=delivery_format,
            description=description,
        )
    )
    body["dlq_enabled"] = dlq
    if paused:
        body["paused"] = True
    if batch := batching.given():
        body["batch"] = batch
    auth_body = _auth_body(endpoint_auth.auth, endpoint_auth.changes(), None)
    if auth_body is not None:
        body["auth"] = auth_body
    return post(_subs(project), body, text=lambda sub: _created(project, name, sub))


@command(app, "list")
def list_(project: Project, page: Paging, output: Output = "text") -> Call:
    """List the subscriptions of a project: a page (the next page's command is printed under
    it), or every page with --all; --search finds them by name or description."""
    columns = Columns(
        f"subscriptions of {project}",
        ("name", "topic", "endpoint", "state", "dlq", "last error", "filter", "secret"),
        lambda s: (
            s["name"],
            f"{s['topic_project']}/{s['topic']}",
            s["endpoint"]["url"],
            _state(s),
            dlq_line(s.get("dlq")),
            _last_error(s.get("last_failure")),
            s.get("filter") or "",
            _secret_state(s),
        ),
    )
    again = f"httpbus sub list {project}"
    where = _subs(project)
    return listing(where, columns, page=page, counted="subscription", again=again, output=output)


def _last_error(failure: dict[str, Any] | None) -> str:
    """A list row's last failure, short: ``HTTP 500: database on fire`` (60 characters)."""
    if not failure:
        return "-"
    said = str(failure.get("error") or failure.get("status") or "failed")
    return said if len(said) <= 60 else said[:59] + "…"


def _pairs(values: dict[str, Any] | None) -> str:
    return ", ".join(f"{k} {v}" for k, v in (values or {}).items()) or "-"


def _settings(sub: dict[str, Any]) -> str:
    """A subscription's settings, a line per part (secrets masked as the API shows them)."""
    endpoint = sub["endpoint"]
    disable = endpoint.get("disable_after_s")
    headers = endpoint.get("headers") or {}
    batch = sub.get("batch")
    return "\n".join(
        (
            f"{sub['project']}/{sub['name']} ({_state(sub)}) reads "
            f"{sub['topic_project']}/{sub['topic']}, shards {sub.get('shards', 1)}",
            f"endpoint  {endpoint.get('method', 'POST')} {endpoint['url']}  timeout "
            f"{endpoint.get('timeout_ms')} ms  disable after "
            + ("never" if disable is None else f"{disable} s"),
            "headers   " + (", ".join(f"{k}: {v}" for k, v in headers.items()) or "-"),
            "auth      " + _pairs({k: v for k, v in (sub.get("auth") or {}).items() if v}),
            f"filter    {sub.get('filter') or '-'}",
            f"retry     {_pairs(sub.get('retry'))}",
            f"circuit   {_pairs(sub.get('circuit_breaker'))}",
            f"limits    max_in_flight {sub.get('max_in_flight')}, rate_limit_per_second "
            f"{sub.get('rate_limit_per_second') or '-'}, delay_ms {sub.get('delay_ms')}",
            f"delivery  {sub.get('delivery_format', 'raw')}, "
            f"batch {_pairs(batch) if batch else 'off'}, "
            f"dlq {'on' if sub.get('dlq_enabled', True) else 'off'}",
            f"secret    {_secret_state(sub)}",
        )
    )


@command(app)
def show(project: Project, name: Name) -> Call:
    """A subscription's settings: endpoint (method, timeout, headers, disable-after), auth,
    filter, retry policy, circuit breaker, limits, delivery, signing secret's state."""
    return get(_subs(project, name), text=_settings)


def print_status(status: dict[str, Any]) -> None:
    """A subscription's status as a few lines and a partition table."""
    rates, totals = status.get("rates") or {}, status.get("totals") or {}
    circuit = status.get("circuit") or {}
    state = status.get("state_detail") or status["state"]  # disabled (endpoint failing since …)
    rate = circuit.get("rate_per_s")
    pace = "" if rate is None else f" ({rate:g}/s allowed)"  # the breaker's adaptive rate
    typer.echo(
        f"{status['subscription']}: {state}  worker {status.get('worker') or '-'}  "
        f"segment {status.get('segment') or '-'}  circuit {circuit.get('state', '-')}{pace}"
    )
    typer.echo(f"lag {status['lag']}  in flight {status['in_flight']}")
    typer.echo(
        "rates/s  delivered {:.1f}  failed {:.1f}  filtered {:.1f}".format(
            rates.get("delivered_per_s", 0),
            rates.get("failed_per_s", 0),
            rates.get("filtered_per_s", 0),
        )
    )
    typer.echo("totals   " + "  ".join(f"{k} {v}" for k, v in totals.items()))
    typer.echo(f"dlq      {dlq_line(status.get('dlq'))}")
    failure = status.get("last_failure")
    if failure:
        typer.echo(
            f"last failure  {failure.get('at')}  {failure.get('error') or failure.get('status')}"
        )
    rows = [
        (p["partition"], p["committed"], p["end"], p["lag"]) for p in status.get("partitions", [])
    ]
    if rows:
        table(None, ("partition", "committed", "end", "lag"), rows)
    shard_rows = [
        (u["shard"], u.get("worker") or "-", u["state"], u["lag"]) for u in status.get("shards", [])
    ]
    if shard_rows:
        table(None, ("shard", "worker", "state", "lag"), shard_rows)


@command(app)
def update(
    project: Project,
    name: Name,
    *,
    endpoint: Annotated[str | None, typer.Option(help="New webhook URL (http or https).")] = None,
    timeout_ms: TimeoutMs = None,
    method: Method = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            "--header",
            help="NAME=VALUE to send with every delivery (repeat; added to, or replacing, "
            "the endpoint's headers of that name).",
        ),
    ] = None,
    remove_header: Annotated[
        list[str] | None, typer.Option(help="A header not to send any more (repeat).")
    ] = None,
    disable_after: DisableAfter = None,
    filter_: Annotated[str | None, typer.Option("--filter", help="CEL filter expression.")] = None,
    no_filter: Annotated[bool, typer.Option("--no-filter", help="Deliver everything.")] = False,
    retrying: Retrying,
    max_in_flight: Annotated[int | None, typer.Option(min=1, help="In-flight limit.")] = None,
    rate_limit: Annotated[float | None, typer.Option(help="Messages per second.")] = None,
    no_rate_limit: Annotated[
        bool, typer.Option("--no-rate-limit", help="Remove the rate limit.")
    ] = False,
    delay_ms: Annotated[int | None, typer.Option(min=0, help="Hold every message.")] = None,
    dlq: Annotated[
        bool | None, typer.Option("--dlq/--no-dlq", help="Dead-letter what fails for good.")
    ] = None,
    description: Annotated[str | None, typer.Option(help="What the subscription is for.")] = None,
    batching: Batching,
    no_batch: Annotated[
        bool, typer.Option("--no-batch", help="One message per request again.")
    ] = False,
    delivery_format: Format = None,
    endpoint_auth: EndpointAuth,
) -> Call:
    """Change a subscription's settings; the others stay as they are.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile). Its topic
    is fixed; the signing secret changes by rotate-secret, pausing by pause and resume."""
    if filter_ is not None and no_filter:
        raise fail("give --filter or --no-filter, not both", EXIT_USAGE)
    if rate_limit is not None and no_rate_limit:
        raise fail("give --rate-limit or --no-rate-limit, not both", EXIT_USAGE)
    batch_changes = batching.given()
    if batch_changes and no_batch:
        raise fail("give --batch… or --no-batch, not both", EXIT_USAGE)
    endpoint_changes = _endpoint(
        url=endpoint, timeout_ms=timeout_ms, method=method, disable_after=disable_after
    )
    added, removed = _headers(header or []), {h.lower() for h in remove_header or []}
    if both := sorted(h for h in added if h.lower() in removed):
        raise fail(f"--header and --remove-header both name {both[0]}", EXIT_USAGE)
    retry_changes = retrying.retry_policy()
    circuit_changes = retrying.circuit_breaker()
    wanted = _given(
        filter=filter_,
        max_in_flight=max_in_flight,
        rate_limit_per_second=rate_limit,
        delay_ms=delay_ms,
        dlq_enabled=dlq,
        description=description,
        delivery_format=delivery_format,
    )
    wanted.update({"filter": None} if no_filter else {})
    wanted.update({"rate_limit_per_second": None} if no_rate_limit else {})
    wanted.update({"batch": None} if no_batch else {})
    auth, auth_changes = endpoint_auth.auth, endpoint_auth.changes()
    if (
        auth is None
        and not auth_changes
        and not (wanted or endpoint_changes or retry_changes or batch_changes)
        and not (added or removed or circuit_changes)
    ):
        raise fail("nothing to change: give at least one setting (see --help)", EXIT_USAGE)

    def body(current: dict[str, Any]) -> dict[str, Any]:
        headers = {
            k: v
            for k, v in (current["endpoint"].get("headers") or {}).items()
            if k.lower() not in removed and k.lower() not in {a.lower() for a in added}
        }
        nested = {
            "endpoint": {**current["endpoint"], **endpoint_changes, "headers": headers | added},
            "retry": {**current["retry"], **retry_changes},
        }
        if circuit_changes:
            nested["circuit_breaker"] = {**current["circuit_breaker"], **circuit_changes}
        if batch_changes:  # on the batch settings in force, or the defaults
            nested["batch"] = {**(current.get("batch") or {}), **batch_changes}
        auth_body = _auth_body(auth, auth_changes, current.get("auth"))
        if auth_body is not None:
            nested["auth"] = auth_body
        return update_body(current, {**wanted, **nested})

    fields = [f for f in SETTINGS_FIELDS if f != "paused"]
    return updated(
        _subs(project, name),
        body,
        fields=lambda sub: {f: sub.get(f) for f in fields},
        said=f"updated subscription {project}/{name}",
    )


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@command(app)
def delete(project: Project, name: Name, yes: Yes = False) -> Call:
    """Delete a subscription (asks first unless --yes).

    Its deliveries stop for good."""
    return removal(
        _subs(project, name),
        ask=f"delete subscription {project}/{name}?",
        yes=yes,
        said=f"deleted subscription {project}/{name}",
        record={"deleted": "subscription", "project": project, "subscription": name},
    )


@command(app)
def enable(project: Project, name: Name) -> Call:
    """Deliver again after the subscription was disabled.

    A subscription is disabled when its endpoint has failed for too long; enabled, it
    resumes from the position it stopped at."""
    return post(_subs(project, name, "enable"), text=lambda _: f"{project}/{name} enabled")


def tested(result: dict[str, Any]) -> str:
    """A test event's result in a few lines: what the endpoint answered, and how fast."""
    status = result.get("status")
    verdict = "delivered" if result.get("delivered") else "failed"
    lines = [
        f"test event {result.get('message_id')}: {verdict}, "
        f"HTTP {status if status is not None else '—'} in {result.get('latency_ms')} ms "
        f"(sent by {result.get('worker')})"
    ]
    if result.get("error"):
        lines.append(f"error: {result['error']}")
    if result.get("answer"):
        lines.append(f"answer: {result['answer']}")
    return "\n".join(lines)


@command(app, "test-event")
def test_event(project: Project, name: Name) -> Call:
    """Send a signed test event (X-Test: true) to the subscription's endpoint now.

    The worker holding the subscription sends it as it sends deliveries; shows the
    endpoint's status, latency and the start of its answer."""
    return post(_subs(project, name, "test-event"), text=tested)


@command(app)
def resend(
    project: Project,
    name: Name,
    ids: Annotated[list[str], typer.Argument(help="Message ids (X-Message-Id), one or more.")],
    output: Output = "text",
) -> Call:
    """Send messages of the topic to this subscription again, one by one (a progress bar).

    Each goes through the subscription's filter, signing, retries and DLQ; no other
    subscription sees it. The message's trace (httpbus trace) shows a `resent` event."""
    where = _subs(project, name, "resend")

    async def work(api: AdminClient) -> list[dict[str, Any]]:
        done: list[dict[str, Any]] = []
        with progress("resending", output) as bar:
            task = bar.add_task("resending", total=len(ids))
            for mid in ids:
                done.append(await api.post(where, {"message_id": mid}))
                bar.advance(task)
        return done

    def shown(done: list[dict[str, Any]]) -> str:
        lines = [f"resent {len(done)} to {project}/{name}"]
        lines += [f"  {d['message_id']}  trace: {d['trace']}" for d in done]
        return "\n".join(lines)

    return Call(work, text=shown)


@command(app)
def recover(
    project: Project,
    name: Name,
    since: Annotated[str, typer.Option(help="Failed at or after this RFC 3339 time.")],
    until: Annotated[
        str, typer.Option(help="Failed before this RFC 3339 time (or 'now').")
    ] = "now",
    batch: Annotated[int, typer.Option(min=1, max=10_000, help="Messages per request.")] = 1000,
    output: Output = "text",
) -> Call:
    """Re-deliver the dead-lettered messages whose last failure lies between two times.

    Loops until none of the window remain, with a progress bar; each goes through the
    normal path with its attempts reset, audited `recovered`."""
    body = {
        "since": time_option(since, "--since"),
        "until": time_option(until, "--until"),
        "limit": batch,
    }
    where = _subs(project, name, "recover")
    return batches("recovering", "recovered", lambda api: api.post(where, body), output)


@command(app)
def status(
    project: Project,
    name: Name,
    range_: Annotated[
        Literal["10m", "1h"], typer.Option("--range", help="How far back the history goes.")
    ] = "1h",
) -> Call:
    """Lag, in-flight, rates, totals, the DLQ as stored and circuit state of a subscription."""
    return get(_subs(project, name, "status"), {"range": range_}, text=print_status)


def _pause(project: str, name: str, paused: bool) -> Call:
    return Call(
        lambda api: api.set_paused(project, name, paused),
        text=lambda sub: f"{project}/{name} {'paused' if sub.get('paused') else 'running'}",
    )


@command(app)
def pause(project: Project, name: Name) -> Call:
    """Stop delivering (the position is kept)."""
    return _pause(project, name, True)


@command(app)
def resume(project: Project, name: Name) -> Call:
    """Start delivering again from the kept position."""
    return _pause(project, name, False)


@command(app)
def seek(
    project: Project,
    name: Name,
    to: Annotated[
        Literal["earliest", "latest"] | None, typer.Option(help="earliest or latest.")
    ] = None,
    timestamp: Annotated[
        str | None, typer.Option(help="RFC 3339 time, e.g. 2026-01-31T12:00:00Z.")
    ] = None,
) -> Call:
    """Move a subscription's position to the earliest, the latest, or a time."""
    if (to is None) == (timestamp is None):
        raise fail("give exactly one of --to earliest|latest or --timestamp TIME", EXIT_USAGE)
    body = {"to": to} if to else {"timestamp": rfc3339(str(timestamp), "--timestamp")}

    def moved(found: dict[str, Any]) -> str:
        where = ", ".join(f"p{k}@{v}" for k, v in sorted(found["positions"].items()))
        return f"{project}/{name} now at segment {found['segment']}: {where or 'no partitions'}"

    return post(_subs(project, name, "seek"), body, text=moved)


def _secret_state(sub: dict[str, Any]) -> str:
    """What the list says of a subscription's signing secret (never the secret)."""
    if not sub.get("signing_secret_set", True):
        return "none"
    rotated = sub.get("signing_secret_rotated_at")
    text = f"rotated {rotated}" if rotated else "set"
    overlap = sub.get("previous_secrets_until")
    return f"{text}, previous signs until {overlap}" if overlap else text


def _secrets(project: str, name: str) -> Any:
    def shown(found: dict[str, Any]) -> str:
        lines = [f"{project}/{name} signs with:"]
        for entry in found["secrets"]:
            until = entry.get("until")
            lines.append(f"  {entry['secret']}  " + (f"until {until}" if until else "current"))
        headers = found.get("endpoint_headers") or {}
        if headers:  # reveal only: the endpoint's credential headers
            lines.append("and sends these endpoint headers:")
            lines += [f"  {header}: {value}" for header, value in headers.items()]
        return "\n".join(lines)

    return shown


@command(app, "rotate-secret")
def rotate_secret(
    project: Project,
    name: Name,
    secret: Annotated[
        str | None, typer.Option(help="The new secret (whsec_…); generated when absent.")
    ] = None,
    overlap_s: Annotated[
        int | None,
        typer.Option(min=0, help="Seconds the current secret keeps signing too (default 24 h)."),
    ] = None,
) -> Call:
    """Sign with a new secret; the old one signs beside it until the overlap ends. Prints
    the new secret, this once."""
    body = _given(secret=secret, overlap_s=overlap_s)
    return post(_subs(project, name) + "/secret:rotate", body, text=_secrets(project, name))


@command(app, "reveal-secret")
def reveal_secret(project: Project, name: Name) -> Call:
    """Print every signing secret in force and the endpoint's credential headers (written to
    the control plane's audit log)."""
    return post(_subs(project, name) + "/secret:reveal", text=_secrets(project, name))


command(app)(sub_replay.replay)
command(app, "replay-status")(sub_replay.replay_status)

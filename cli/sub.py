"""``httpbus sub``: create, list, update, delete, status, pause, resume, enable, seek
subscriptions; rotate and reveal their signing secrets."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import typer

from cli.common import (
    DEFAULT_URL,
    EXIT_USAGE,
    Limit,
    Offset,
    Output,
    Project,
    Token,
    Url,
    Yes,
    changes,
    confirm,
    emit_json,
    fail,
    paged_footer,
    run,
    table,
)
from control_plane.client import SETTINGS_FIELDS, AdminClient, path, update_body

app = typer.Typer(
    help="Subscriptions: create, list, update, delete, status, pause, resume, enable, seek, "
    "rotate-secret, reveal-secret.",
    no_args_is_help=True,
)

Name = Annotated[str, typer.Argument(help="Subscription name.")]
Backoff = Literal["fixed", "linear", "exponential"]


BatchMessages = Annotated[
    int | None,
    typer.Option("--batch", min=1, max=1_000, help="Deliver up to this many messages per request."),
]
BatchMaxBytes = Annotated[
    int | None, typer.Option(min=1, help="Batches: the most payload bytes per request.")
]
BatchMaxWait = Annotated[
    int | None,
    typer.Option(min=0, max=60_000, help="Batches: send a batch this long after its first."),
]


def _subs(project: str, *rest: str) -> str:
    return path("v1", "projects", project, "subscriptions", *rest)


@app.command()
def create(
    project: Project,
    name: Name,
    topic: Annotated[str, typer.Option(help="Topic, or project/topic.")],
    endpoint: Annotated[str, typer.Option(help="Webhook URL (http or https).")],
    filter_: Annotated[str | None, typer.Option("--filter", help="CEL filter expression.")] = None,
    max_attempts: Annotated[int | None, typer.Option(min=1, help="Delivery attempts.")] = None,
    backoff: Annotated[
        Literal["fixed", "linear", "exponential"] | None, typer.Option(help="Retry backoff.")
    ] = None,
    max_in_flight: Annotated[int | None, typer.Option(min=1, help="In-flight limit.")] = None,
    rate_limit: Annotated[float | None, typer.Option(help="Messages per second.")] = None,
    delay_ms: Annotated[int | None, typer.Option(min=0, help="Hold every message.")] = None,
    dlq: Annotated[bool, typer.Option(help="Dead-letter what fails for good.")] = True,
    shards: Annotated[
        int | None, typer.Option(min=1, max=64, help="Workers sharing the delivery (fixed).")
    ] = None,
    batch: BatchMessages = None,
    batch_max_bytes: BatchMaxBytes = None,
    batch_max_wait_ms: BatchMaxWait = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Create a subscription that pushes a topic's messages to an endpoint."""
    body: dict[str, Any] = {"name": name, "topic": topic, "endpoint": {"url": endpoint}}
    retry = {"max_attempts": max_attempts, "backoff": backoff}
    if any(v is not None for v in retry.values()):
        body["retry"] = {k: v for k, v in retry.items() if v is not None}
    optional = {
        "filter": filter_,
        "max_in_flight": max_in_flight,
        "rate_limit_per_second": rate_limit,
        "delay_ms": delay_ms,
        "shards": shards,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    body["dlq_enabled"] = dlq
    batching = _given(max_messages=batch, max_bytes=batch_max_bytes, max_wait_ms=batch_max_wait_ms)
    if batching:
        body["batch"] = batching

    async def work(api: AdminClient) -> Any:
        return await api.post(_subs(project), body)

    created = run(url, token, work)
    if output == "json":
        emit_json(created)
    else:
        typer.echo(f"created subscription {project}/{name} → {created['endpoint']['url']}")
        typer.echo(f"signing secret (shown this once): {created['signing_secret']}")


@app.command("list")
def list_(
    project: Project,
    offset: Offset = 0,
    limit: Limit = 100,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """List the subscriptions of a project (a page at a time)."""

    async def work(api: AdminClient) -> Any:
        return await api.get(_subs(project), {"offset": offset, "limit": limit})

    page = run(url, token, work)
    if output == "json":
        emit_json(page)
        return
    rows = [
        (
            s["name"],
            f"{s['topic_project']}/{s['topic']}",
            s["endpoint"]["url"],
            "disabled" if s.get("disabled") else "paused" if s.get("paused") else "active",
            s.get("filter") or "",
            _secret_state(s),
        )
        for s in page["items"]
    ]
    columns = ("name", "topic", "endpoint", "state", "filter", "secret")
    table(f"subscriptions of {project}", columns, rows)
    paged_footer(page)


def print_status(status: dict[str, Any]) -> None:
    """A subscription's status as a few lines and a partition table."""
    rates, totals = status.get("rates") or {}, status.get("totals") or {}
    circuit = status.get("circuit") or {}
    state = status.get("state_detail") or status["state"]  # disabled (endpoint failing since …)
    typer.echo(
        f"{status['subscription']}: {state}  worker {status.get('worker') or '-'}  "
        f"segment {status.get('segment') or '-'}  circuit {circuit.get('state', '-')}"
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


@app.command()
def update(
    project: Project,
    name: Name,
    endpoint: Annotated[str | None, typer.Option(help="New webhook URL (http or https).")] = None,
    timeout_ms: Annotated[
        int | None, typer.Option(min=1, help="How long one delivery may take.")
    ] = None,
    method: Annotated[
        Literal["POST", "PUT"] | None, typer.Option(help="HTTP method of deliveries.")
    ] = None,
    filter_: Annotated[str | None, typer.Option("--filter", help="CEL filter expression.")] = None,
    no_filter: Annotated[bool, typer.Option("--no-filter", help="Deliver everything.")] = False,
    max_attempts: Annotated[int | None, typer.Option(min=1, help="Delivery attempts.")] = None,
    backoff: Annotated[Backoff | None, typer.Option(help="Retry backoff.")] = None,
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
    batch: BatchMessages = None,
    batch_max_bytes: BatchMaxBytes = None,
    batch_max_wait_ms: BatchMaxWait = None,
    no_batch: Annotated[
        bool, typer.Option("--no-batch", help="One message per request again.")
    ] = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Change a subscription's settings; the others stay as they are.

    A compare-and-set on the version just read (exit 4 if it changed meanwhile). Its topic
    is fixed; the signing secret changes by rotate-secret, pausing by pause and resume."""
    if filter_ is not None and no_filter:
        raise fail("give --filter or --no-filter, not both", EXIT_USAGE)
    if rate_limit is not None and no_rate_limit:
        raise fail("give --rate-limit or --no-rate-limit, not both", EXIT_USAGE)
    batch_changes = _given(
        max_messages=batch, max_bytes=batch_max_bytes, max_wait_ms=batch_max_wait_ms
    )
    if batch_changes and no_batch:
        raise fail("give --batch… or --no-batch, not both", EXIT_USAGE)
    endpoint_changes = _given(url=endpoint, timeout_ms=timeout_ms, method=method)
    retry_changes = _given(max_attempts=max_attempts, backoff=backoff)
    wanted = _given(
        filter=filter_,
        max_in_flight=max_in_flight,
        rate_limit_per_second=rate_limit,
        delay_ms=delay_ms,
        dlq_enabled=dlq,
        description=description,
    )
    wanted.update({"filter": None} if no_filter else {})
    wanted.update({"rate_limit_per_second": None} if no_rate_limit else {})
    wanted.update({"batch": None} if no_batch else {})
    if not (wanted or endpoint_changes or retry_changes or batch_changes):
        raise fail("nothing to change: give at least one setting (see --help)", EXIT_USAGE)

    async def work(api: AdminClient) -> tuple[Any, Any]:
        current = await api.get(_subs(project, name))
        nested = {
            "endpoint": {**current["endpoint"], **endpoint_changes},
            "retry": {**current["retry"], **retry_changes},
        }
        if batch_changes:  # on the batch settings in force, or the defaults
            nested["batch"] = {**(current.get("batch") or {}), **batch_changes}
        body = update_body(current, {**wanted, **nested})
        return current, await api.put(_subs(project, name), body)

    before, after = run(url, token, work)
    if output == "json":
        emit_json(after)
        return
    fields = [f for f in SETTINGS_FIELDS if f != "paused"]
    done = changes({f: before.get(f) for f in fields}, {f: after.get(f) for f in fields})
    typer.echo(f"updated subscription {project}/{name}: {', '.join(done) or 'no change'}")


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


@app.command()
def delete(
    project: Project,
    name: Name,
    yes: Yes = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Delete a subscription (asks first unless --yes).

    Its deliveries stop for good."""
    confirm(f"delete subscription {project}/{name}?", yes)

    async def work(api: AdminClient) -> None:
        await api.delete(_subs(project, name))

    run(url, token, work)
    if output == "json":
        emit_json({"deleted": "subscription", "project": project, "subscription": name})
    else:
        typer.echo(f"deleted subscription {project}/{name}")


@app.command()
def enable(
    project: Project, name: Name, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """Deliver again after the subscription was disabled.

    A subscription is disabled when its endpoint has failed for too long; enabled, it
    resumes from the position it stopped at."""

    async def work(api: AdminClient) -> Any:
        return await api.post(_subs(project, name, "enable"))

    enabled = run(url, token, work)
    if output == "json":
        emit_json(enabled)
    else:
        typer.echo(f"{project}/{name} enabled")


@app.command()
def status(
    project: Project,
    name: Name,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Lag, in-flight, rates, totals and circuit state of a subscription."""

    async def work(api: AdminClient) -> Any:
        return await api.get(_subs(project, name, "status"))

    found = run(url, token, work)
    emit_json(found) if output == "json" else print_status(found)


def _pause(project: str, name: str, paused: bool, url: str, token: str, output: str) -> None:
    async def work(api: AdminClient) -> Any:
        return await api.set_paused(project, name, paused)

    sub = run(url, token, work)
    if output == "json":
        emit_json(sub)
    else:
        typer.echo(f"{project}/{name} {'paused' if sub.get('paused') else 'running'}")


@app.command()
def pause(
    project: Project, name: Name, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """Stop delivering (the position is kept)."""
    _pause(project, name, True, url, token, output)


@app.command()
def resume(
    project: Project, name: Name, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """Start delivering again from the kept position."""
    _pause(project, name, False, url, token, output)


@app.command()
def seek(
    project: Project,
    name: Name,
    to: Annotated[
        Literal["earliest", "latest"] | None, typer.Option(help="earliest or latest.")
    ] = None,
    timestamp: Annotated[
        str | None, typer.Option(help="RFC 3339 time, e.g. 2026-01-31T12:00:00Z.")
    ] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Move a subscription's position to the earliest, the latest, or a time."""
    if (to is None) == (timestamp is None):
        raise fail("give exactly one of --to earliest|latest or --timestamp TIME", EXIT_USAGE)
    if timestamp is not None:
        try:
            datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
        except ValueError:
            raise fail(f"--timestamp {timestamp!r} is not an RFC 3339 time", EXIT_USAGE) from None
    body = {"to": to} if to else {"timestamp": timestamp}

    async def work(api: AdminClient) -> Any:
        return await api.post(_subs(project, name, "seek"), body)

    moved = run(url, token, work)
    if output == "json":
        emit_json(moved)
    else:
        where = ", ".join(f"p{k}@{v}" for k, v in sorted(moved["positions"].items()))
        typer.echo(
            f"{project}/{name} now at segment {moved['segment']}: {where or 'no partitions'}"
        )


def _secret_state(sub: dict[str, Any]) -> str:
    """What the list says of a subscription's signing secret (never the secret)."""
    if not sub.get("signing_secret_set", True):
        return "none"
    rotated = sub.get("signing_secret_rotated_at")
    text = f"rotated {rotated}" if rotated else "set"
    overlap = sub.get("previous_secrets_until")
    return f"{text}, previous signs until {overlap}" if overlap else text


def _print_secrets(project: str, name: str, shown: dict[str, Any]) -> None:
    typer.echo(f"{project}/{name} signs with:")
    for entry in shown["secrets"]:
        until = entry.get("until")
        typer.echo(f"  {entry['secret']}  " + (f"until {until}" if until else "current"))


@app.command("rotate-secret")
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
    url: Url = DEFAULT_URL,
    token: Token = "",
    output: Output = "text",
) -> None:
    """Sign with a new secret; the old one signs beside it until the overlap ends. Prints
    the new secret, this once."""
    body: dict[str, Any] = {}
    if secret is not None:
        body["secret"] = secret
    if overlap_s is not None:
        body["overlap_s"] = overlap_s

    async def work(api: AdminClient) -> Any:
        return await api.post(_subs(project, name) + "/secret:rotate", body)

    shown = run(url, token, work)
    emit_json(shown) if output == "json" else _print_secrets(project, name, shown)


@app.command("reveal-secret")
def reveal_secret(
    project: Project, name: Name, url: Url = DEFAULT_URL, token: Token = "", output: Output = "text"
) -> None:
    """Print every signing secret in force (written to the control plane's audit log)."""

    async def work(api: AdminClient) -> Any:
        return await api.post(_subs(project, name) + "/secret:reveal")

    shown = run(url, token, work)
    emit_json(shown) if output == "json" else _print_secrets(project, name, shown)

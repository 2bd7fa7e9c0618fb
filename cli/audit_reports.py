"""``httpbus audit runs|show|hourly|cutovers``: read the audit reports the control plane
serves (``/v1/audit``, admins only) — the reconciliation runs, one run's findings, the hourly
report per subscription, the cutover verifications.

These are API clients; ``audit run``, ``job`` and ``load`` beside them are local Spark jobs
(:mod:`cli.audit`) that write the reports. The root adds these commands to the ``audit``
group (:func:`register`), so this module imports nothing of the local jobs::

    httpbus audit runs --limit 5
    httpbus audit runs --limit 5 --cursor <the cursor its last line named>   # older ones
    httpbus audit show 12              # lost, late and duplicated message ids of run 12
    httpbus audit hourly --subscription shop/mailer --since 2026-01-31T00:00:00Z
    httpbus audit cutovers
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.kit import Call, Columns, command, get, rfc3339, table
from control_plane.client import path

Limit = Annotated[int, typer.Option(min=1, max=500, help="How many, newest first.")]
RUNS = Columns(
    "reconciliation runs",
    ("id", "started", "mode", "events", "expected", "lost", "late", "pending", "duplicates"),
    lambda r: (
        r["id"],
        r["started_at"],
        r["mode"],
        r["events"],
        r["expected"],
        r["lost"],
        r["late"],
        r["pending"],
        r["duplicates"],
    ),
)
HOURLY = Columns(
    "hourly report",
    (
        "subscription",
        "window start",
        "accepted",
        "delivered",
        "filtered",
        "dlq",
        "failure rate",
        "p50 ms",
        "p99 ms",
    ),
    lambda h: (
        h["subscription"],
        h["window_start"],
        h["accepted"],
        h["delivered"],
        h["filtered"],
        h["dead_lettered"],
        "-" if h["failure_rate"] is None else f"{h['failure_rate']:.4g}",
        h["latency_ms"]["p50"],
        h["latency_ms"]["p99"],
    ),
)
CUTOVERS = Columns(
    "cutover verifications",
    ("id", "topic", "segments", "sealed", "old", "new", "groups across", "ok"),
    lambda c: (
        c["id"],
        f"{c['project']}/{c['topic']}",
        f"{c['from_segment']} → {c['to_segment']}",
        c["sealed_at"],
        c["old_segment_messages"],
        c["new_segment_messages"],
        c["groups_across"],
        "yes" if c["ok"] else "NO",
    ),
)
FINDINGS = ("lost", "late", "duplicates")


Older = Annotated[
    str | None,
    typer.Option(help="The page older than the one that printed this cursor (its last line)."),
]


def _rows(key: str, columns: Columns, what: str) -> Any:
    def shown(found: dict[str, Any]) -> str:
        columns.print(found[key])
        older = found.get("next_cursor")
        more = f"; older ones: --cursor {older}" if older else ""
        return f"{len(found[key])} {what}(s){more}"

    return shown


def runs(limit: Limit = 20, cursor: Older = None) -> Call:
    """The latest reconciliation runs: what each expected, and what was lost, late, pending
    or delivered twice."""
    params = {"limit": limit, "cursor": cursor}
    return get(path("v1", "audit", "runs"), params, text=_rows("runs", RUNS, "run"))


def _run(found: dict[str, Any]) -> str:
    typer.echo(
        f"run {found['id']} ({found['mode']}, {found['source']}) started {found['started_at']}, "
        f"{found['events']} events, window {found['since'] or '-'} … {found['until'] or '-'}"
    )
    tallies = found.get("subscriptions") or []
    if tallies:
        names = [k for k in tallies[0] if k != "subscription"]
        table(
            None,
            ("subscription", *names),
            [(t["subscription"], *map(t.get, names)) for t in tallies],
        )
    for kind in FINDINGS:
        named = found.get(kind) or []
        for f in named:
            extra = f" ×{f['deliveries']}" if f.get("deliveries") else ""
            typer.echo(f"{kind} {f['subscription']} {f['message_id']}{extra}")
    return ", ".join(f"{kind} {len(found.get(kind) or [])}" for kind in FINDINGS)


def show(run_id: Annotated[int, typer.Argument(min=0, help="The run's id (from runs).")]) -> Call:
    """One reconciliation run: its counts per subscription and every message id it names."""
    return get(path("v1", "audit", "runs", str(run_id)), text=_run)


def hourly(
    project: Annotated[str | None, typer.Option(help="Only this project's subscriptions.")] = None,
    subscription: Annotated[
        str | None,
        typer.Option(help="Only this subscription: project/name (or name with --project)."),
    ] = None,
    since: Annotated[str | None, typer.Option(help="Windows from this RFC 3339 time.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Rows at most.")] = 1_000,
) -> Call:
    """The hourly report: per subscription and hour, counts, failure rate, latency."""
    params = {
        "project": project,
        "subscription": subscription,
        "since": None if since is None else rfc3339(since, "--since"),
        "limit": limit,
    }
    return get(path("v1", "audit", "hourly"), params, text=_rows("rows", HOURLY, "row"))


def cutovers(
    limit: Annotated[int, typer.Option(min=1, max=500, help="How many, newest first.")] = 100,
    cursor: Older = None,
) -> Call:
    """The cutover verifications: every message before the seal in the old segment, after
    it in the new, and group order kept (ok), or what broke."""
    return get(
        path("v1", "audit", "cutovers"),
        {"limit": limit, "cursor": cursor},
        text=_rows("cutovers", CUTOVERS, "verification"),
    )


def register(app: typer.Typer) -> None:
    """Add these commands to the ``audit`` group."""
    for name, declare in (
        ("runs", runs),
        ("show", show),
        ("hourly", hourly),
        ("cutovers", cutovers),
    ):
        command(app, name)(declare)

"""``httpbus overview``: the platform at a glance (``GET /v1/overview``), the same answers as
the web UI's home page: what is failing, where the lag is, which DLQs grow, which endpoints
are disabled, what is being moved, with the rates.

``--watch`` redraws it every ``--interval`` seconds until Ctrl-C (or ``--count`` draws): on
a terminal the screen is cleared before each draw; into a pipe each draw follows the last
under a dated rule, so a log keeps every frame.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any

import typer

from cli.dlq import dlq_line
from cli.kit import Call, Interval, Output, console, get
from control_plane.client import AdminClient, path

ROWS = 10


def _sub(row: dict[str, Any]) -> str:
    return f"{row['project']}/{row['subscription']}"


def _failure(row: dict[str, Any]) -> str:
    last = row.get("last_failure") or {}
    said = last.get("error") or (f"HTTP {last['status']}" if last.get("status") else "")
    codes = ", ".join(f"{k}×{v}" for k, v in sorted((row.get("failures") or {}).items()))
    return "  ".join(part for part in (codes, said[:80]) if part)


def render(seen: dict[str, Any]) -> str:
    """The overview as text: one heading per question, a line per row."""
    rates = seen["rates"]
    published = rates.get("published_per_s")
    moving = seen["in_flight"]
    out = [
        f"httpbus overview at {seen['at']}: {seen['subscriptions']} subscription(s) in "
        f"{len(seen['projects'])} project(s)",
        f"published {'measuring' if published is None else published}/s  "
        f"delivered {rates['delivered_per_s']}/s  failed attempts {rates['failed_per_s']}/s",
        "",
        f"FAILING ({len(seen['failing'])})",
    ]
    for row in seen["failing"][:ROWS]:
        circuit = str(row.get("circuit") or "-").replace("_", "-")
        out.append(
            f"  {_sub(row):<40} circuit {circuit:<9} failed {row['failed_per_s']}/s  "
            f"dlq {dlq_line(row.get('dlq'))}  {_failure(row)}"
        )
    out += ["", f"LAG (largest {len(seen['lag'])})"]
    for row in seen["lag"][:ROWS]:
        oldest = row.get("oldest_unacked_at") or "-"
        out.append(f"  {_sub(row):<40} lag {row['lag']:<10} oldest unacked {oldest}")
    out += ["", f"DLQ GROWING, last hour ({len(seen['dlq_growing'])})"]
    for row in seen["dlq_growing"][:ROWS]:
        out.append(
            f"  {_sub(row):<40} +{row['last_hour']}  last at {row['last_at']}  "
            f"holds {dlq_line(row.get('dlq'))}"
        )
    out += ["", f"DISABLED ({len(seen['disabled'])})"]
    for row in seen["disabled"][:ROWS]:
        out.append(
            f"  {_sub(row):<40} since {row['failing_since']}  {(row.get('last_error') or '')[:80]}"
        )
    count = sum(len(v) for v in moving.values())
    out += ["", f"BEING MOVED ({count})"]
    for c in moving["cutovers"]:
        out.append(
            f"  cutover   {c['project']}/{c['topic']}: {c.get('phase')} "
            f"segment {c.get('from_segment')} -> {c.get('to_segment')}"
        )
    for f in moving["failovers"]:
        out.append(f"  failover  {f['project']}/{f['topic']}: segment {f['segment']} unsealed")
    for m in moving["migrations"]:
        out.append(f"  migration {m['project']}/{m['topic']}: {m.get('phase')}")
    audit = seen.get("audit")
    if audit:
        out += [
            "",
            f"LAST AUDIT #{audit['id']} at {audit['started_at']}: {audit['lost']} lost, "
            f"{audit['duplicates']} duplicate(s), {audit['pending']} pending",
        ]
    return "\n".join(out)


def overview(
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="Redraw every --interval until Ctrl-C.")
    ] = False,
    interval: Interval = 2.0,
    count: Annotated[
        int, typer.Option(min=0, help="With --watch: stop after N draws (0: until Ctrl-C).")
    ] = 0,
    output: Output = "text",
) -> Call:
    """The platform at a glance: what fails, where the lag is, which DLQs grow, disabled
    endpoints, cutovers, failovers and migrations in flight."""
    where = path("v1", "overview")

    async def work(api: AdminClient) -> None:
        draws = 0
        while True:
            seen = await api.get(where)
            draws += 1
            _draw(seen, output, watch, draws)
            if not watch or (count and draws >= count):
                return
            await asyncio.sleep(interval)

    return Call(work, json=None, until_interrupted=True)


def _draw(seen: dict[str, Any], output: str, watch: bool, draws: int) -> None:
    if output == "json":
        typer.echo(json.dumps(seen))
        return
    if watch and console.is_terminal:
        console.clear()
    elif watch and draws > 1:
        typer.echo(f"\n{'-' * 30} {seen['at']} {'-' * 30}")
    typer.echo(render(seen))


def _found(seen: dict[str, Any]) -> str:
    rows = [f"topic {t['project']}/{t['topic']}" for t in seen["topics"]]
    rows += [f"subscription {s['project']}/{s['subscription']}" for s in seen["subscriptions"]]
    rows += [f"message {m['message_id']} in {m['project']}/{m['topic']}" for m in seen["messages"]]
    return "\n".join(rows) or f"nothing found for {seen['q']!r}"


def search(
    query: Annotated[str, typer.Argument(help="A name, part of one, or a message id.")],
) -> Call:
    """Topics and subscriptions by name, and where a message id was traced, in the projects
    you may see (the web UI's header search)."""
    return get(path("v1", "search"), {"q": query}, text=_found)

"""``httpbus topic failover status``: a topic's standby clusters, the segments failovers left
unsealed, its latest failover and what the producers report of its active segment."""

from __future__ import annotations

from typing import Any

import typer

from cli.kit import Call, Project, Topic, command, console, get, table
from control_plane.client import path

app = typer.Typer(help="A topic's automatic failover: status.", no_args_is_help=True)


@command(app)
def status(project: Project, topic: Topic) -> Call:
    """Standby clusters and mode, segments left unsealed, the latest failover (why, when),
    and each producer's latest write figures of the active segment."""
    where = path("v1", "projects", project, "topics", topic, "failover")
    return get(where, text=lambda found: print_status(project, topic, found))


def print_status(project: str, topic: str, found: dict[str, Any]) -> None:
    failover = found.get("failover")
    if failover:
        console.print(
            f"{project}/{topic}: failover {failover['mode']} to {' → '.join(failover['clusters'])}"
        )
    else:
        console.print(f"{project}/{topic}: no standby cluster (no automatic failover)")
    active = found.get("active_segment")
    if active:
        console.print(f"active segment {active['id']} on {active['cluster']}")
    unsealed = found.get("unsealed") or []
    if unsealed:
        ids = ", ".join(map(str, unsealed))
        console.print(f"left unsealed (sealed when their cluster is back): {ids}")
    rows = [
        (s["id"], s["cluster"], s["state"], s.get("opened_by") or "", s.get("unsealed_at") or "")
        for s in found.get("failover_segments") or []
    ]
    if rows:
        table("failover segments", ("segment", "cluster", "state", "opened by", "unsealed"), rows)
    latest = found.get("latest")
    if latest:
        console.print(
            f"latest failover {latest['id']}: {latest['phase']}, segment "
            f"{latest['from_segment']} → {latest['to_segment']} on {latest['cluster']}, "
            f"started {latest['started_at']}: {latest.get('reason') or ''}"
        )
    health = [
        (
            h["member"],
            h["ok"],
            h["failed"],
            "" if h.get("p99_ms") is None else f"{h['p99_ms']:.0f}",
            h.get("failing_since") or "",
            h["age_s"],
        )
        for h in found.get("health") or []
    ]
    if health:
        cols = ("producer", "ok", "failed", "p99 ms", "failing since", "age s")
        table("active segment, last report per producer", cols, health)

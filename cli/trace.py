"""``httpbus trace``: where one message is, and what happened to it for every subscription of
its topic (the trace API, docs/tracing.md); ``--group`` traces the last messages of a group.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.kit import Call, Project, Topic, get, table
from control_plane.client import path


def trace(
    project: Project,
    topic: Topic,
    message_id: Annotated[
        str | None, typer.Argument(help="Message id (X-Message-Id); omit with --group.")
    ] = None,
    group: Annotated[
        str | None, typer.Option(help="Trace the last messages of this group instead.")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="With --group: how many.")] = 10,
) -> Call:
    """Trace a message by id (or a group's last messages): stored where, delivered or not."""
    if (message_id is None) == (group is None):
        raise typer.BadParameter("give a message id or --group, not both")
    base = ("v1", "projects", project, "topics", topic)
    if group is not None:

        def each(found: dict[str, Any]) -> None:
            for one in found["messages"]:
                _show(one)

        return get(path(*base, "groups", group, "messages"), {"limit": limit}, text=each)
    return get(path(*base, "messages", str(message_id)), text=_show)


def _show(trace: dict[str, Any]) -> None:
    stored = trace.get("stored")
    where = (
        f"segment {stored['segment']}, partition {stored['partition']}, "
        f"position {stored['position']}, accepted {stored['accepted_at']}, "
        f"{stored['size']} bytes" + (f", group {stored['group']}" if stored.get("group") else "")
        if stored
        else "its accepted event is not in the index (older than the retention)"
    )
    typer.echo(f"{trace['project']}/{trace['topic']} {trace['message_id']}: {where}")
    for name, value in ((stored or {}).get("headers") or {}).items():
        typer.echo(f"  {name}: {value}")
    rows = [
        (
            sub["subscription"],
            sub["state"],
            event["at"],
            event["type"],
            event.get("attempt", ""),
            event.get("status", ""),
            _ms(event.get("latency_ms")),
            (event.get("error") or event.get("answer") or "")[:60],
            _ms(event.get("level_ms")),
        )
        for sub in trace["subscriptions"]
        for event in sub["events"] or [{"at": "", "type": "(no event yet)"}]
    ]
    cols = (
        "subscription",
        "state",
        "at",
        "event",
        "attempt",
        "status",
        "latency",
        "answer",
        "delay level",
    )
    table(f"trace of {trace['message_id']}", cols, rows)


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:g} ms"

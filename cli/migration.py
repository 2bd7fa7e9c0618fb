"""``httpbus topic migration start|status|abandon|check``: a verified migration of a topic
whose active segment is an adopted Kafka topic (docs/migrating.md).

``start``, ``status`` and ``abandon`` go through the admin API. ``check`` is a local job
(:mod:`cli.migration_check`): it runs the window check on Spark.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import typer

from cli.kit import (
    EXIT_USAGE,
    Call,
    Project,
    Topic,
    command,
    fail,
    instant_ms,
    post,
    rfc3339,
    table,
)
from control_plane.client import AdminClient, path

app = typer.Typer(
    help="A verified migration of an adopted Kafka topic: start, status, check, abandon.",
    no_args_is_help=True,
)


def migration_path(project: str, topic: str) -> str:
    return path("v1", "projects", project, "topics", topic, "migration")


def summary(m: dict[str, Any]) -> str:
    """``dual_write  windows 7 (5 closed)  clean streak 2/3``."""
    closed = sum(1 for w in m["windows"] if w["closed"])
    return (
        f"{m['state']:<11} windows {len(m['windows'])} ({closed} closed)  "
        f"clean streak {m['clean_streak']}/{m['clean_windows']}"
    )


def _at(ms: int) -> str:
    return time.strftime("%m-%dT%H:%M:%S", time.gmtime(ms / 1000))


def print_migration(m: dict[str, Any], last: int = 20) -> None:
    """A migration as a header and its newest ``last`` windows."""
    typer.echo(
        f"migration {m['id']} of {m['project']}/{m['topic']}: segment "
        f"{m['external_segment']} (external) → shadow {m['shadow_segment']} on "
        f"{m['cluster']} ({m['partitions']} partition(s))"
    )
    typer.echo(
        f"window {m['window_s']} s, session gap {m['session_gap_s']} s, "
        f"guard {m['guard_s']} s; {summary(m)}"
    )
    if m.get("switch_skipped") is not None:
        twice = (m.get("switch_duplicates") or 0) + (m.get("rollback_duplicates") or 0)
        back = m.get("rollback_skipped")
        typer.echo(
            f"switch: readers of the shadow segment pass over {m['switch_skipped']} id(s) the "
            "legacy side delivered"
            + ("" if back is None else f"; rollback: the legacy topic over {back}")
            + f"; delivered twice {twice}"
        )
    print_windows(m["windows"][-last:], f"windows (newest {last})")


def print_windows(windows: list[dict[str, Any]], title: str) -> None:
    """Windows as a table, one row each."""
    rows = [
        (
            _at(w["start_ms"]),
            w["matched"],
            w["missing_in_bus"],
            w["missing_in_legacy"],
            w["late"],
            w["duplicates"],
            "clean" if w["clean"] else ("dirty" if w["closed"] else "open"),
            ", ".join((w["missing_in_bus_ids"] + w["missing_in_legacy_ids"])[:5]),
        )
        for w in windows
    ]
    columns = ("window UTC", "matched", "no bus", "no legacy", "late", "dup", "verdict", "missing")
    table(title, columns, rows)


@command(app)
def start(
    project: Project,
    topic: Topic,
    cluster: Annotated[str, typer.Option(help="Cluster of the shadow segment.")],
    partitions: Annotated[
        int | None, typer.Option(min=1, help="Of the shadow segment (default: the external's).")
    ] = None,
    window: Annotated[str, typer.Option(help="Tumbling window: 90s, 10m, 1h.")] = "1h",
    session_gap: Annotated[str, typer.Option(help="A match later than this is late.")] = "5m",
    clean_windows: Annotated[
        int, typer.Option(min=1, help="Closed clean windows in a row before the switch.")
    ] = 3,
    guard: Annotated[str, typer.Option(help="After the switch, the guard period.")] = "1h",
) -> Call:
    """Begin the dual write: producers write a shadow segment on --cluster from now on,
    subscriptions keep delivering from the adopted Kafka topic."""
    body: dict[str, Any] = {
        "cluster": cluster,
        "window": window,
        "session_gap": session_gap,
        "clean_windows": clean_windows,
        "guard": guard,
    }
    if partitions is not None:
        body["partitions"] = partitions
    return post(migration_path(project, topic), body, text=print_migration)


@command(app)
def status(
    project: Project,
    topic: Topic,
    last: Annotated[int, typer.Option(min=1, max=200, help="Windows to show.")] = 20,
    history: Annotated[
        bool, typer.Option(help="Every window, from the report database (beyond the newest 200).")
    ] = False,
    since: Annotated[
        str | None, typer.Option(help="With --history: windows from this RFC 3339 time.")
    ] = None,
) -> Call:
    """The topic's latest migration: its state and the windows the check stored."""
    where = migration_path(project, topic)
    if since is not None and not history:
        raise fail("--since goes with --history", EXIT_USAGE)
    since_ms = None if since is None else instant_ms(rfc3339(since, "--since"), 0)

    async def work(api: AdminClient) -> Any:
        found = await api.get(where)
        if history:
            params = {"limit": 10_000, "since_ms": since_ms}
            windows = await api.get(where + "/windows", params=params)
            found = {**found, "history": windows["windows"]}
        return found

    def shown(found: dict[str, Any]) -> None:
        print_migration(found, last)
        if history:
            print_windows(found["history"], f"every window ({len(found['history'])})")

    return Call(work, shown)


@command(app)
def abandon(project: Project, topic: Topic) -> Call:
    """End the dual write: the shadow segment is dropped, producers are refused again."""
    return Call(
        lambda api: api.delete(migration_path(project, topic)),
        text=lambda found: (
            f"migration {found['id']} of {project}/{topic}: {found['state']}; "
            f"subscriptions keep reading segment {found['external_segment']}"
        ),
    )

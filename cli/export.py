"""``httpbus export PROJECT TOPIC --to DIR``: a topic's messages, every segment, to Parquet.

The CLI resolves the timeline from the metastore and the segment stores into a plan
(:mod:`control_plane.services.export_plan`), then runs the export on Spark
(``spark_master``, local[*] by default; ``spark.export``), or with ``--plan-out`` writes the
plan for ``spark-submit spark/export.py --plan`` on a cluster. See docs/export.md.

``--follow`` keeps exporting: every ``--every`` it re-plans the timeline (so a segment a
cutover added is read from its first message on, and a sealed one up to its recorded end),
reads what lies past the checkpoint (the ends the last round read, per segment and
partition), and rewrites the hours from the earliest ``produced_at`` among those new messages
on. The checkpoint is a JSON file written after each round; a round that dies before writing it
is simply done again (it replaces the same hours).
"""

from __future__ import annotations

import asyncio
import json
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cli import local
from cli.kit import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    ConfigOption,
    Master,
    duration_ms,
    instant_ms,
    require_spark,
)
from cli.local import LocalProject, LocalTopic
from control_plane.services.export_plan import PlannedTimeline, clusters_of, plan_timeline
from control_plane.settings import ControlPlaneSettings
from core.errors import HttpbusError, NotFound
from metastore.catalog import Catalog
from metastore.config import open_metastore
from segments.registry import open_store
from spark.plan import Ends, ends_of, whole_hours

console = Console(soft_wrap=True)
FORMATS = ("parquet",)
CHECKPOINT = "_httpbus_export_checkpoint.json"


async def _plan(
    settings: ControlPlaneSettings, project: str, topic: str, since_ms: int | None
) -> PlannedTimeline:
    async with open_metastore(settings.metastore) as meta, AsyncExitStack() as stack:
        catalog = Catalog(meta)
        timeline = await catalog.list_segments(project, topic)
        await catalog.get_topic(project, topic)  # NotFound names the topic
        stores = {}
        for name in sorted(clusters_of(timeline)):
            config = settings.clusters.get(name)
            if config is not None:
                stores[name] = await stack.enter_async_context(open_store(config))
        return await plan_timeline(
            catalog, settings.clusters, stores, project, topic, since_ms=since_ms
        )


def export(
    project: LocalProject,
    topic: LocalTopic,
    to: Annotated[str, typer.Option("--to", help="Output folder (or a URL Spark can write).")],
    format: Annotated[str, typer.Option("--format", help="Output format: parquet.")] = "parquet",
    since: Annotated[
        str | None, typer.Option(help="Produced at or after: RFC 3339 or a duration ago (2h).")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Produced before: RFC 3339 or a duration ago.")
    ] = None,
    plan_out: Annotated[
        Path | None,
        typer.Option(help="Only write the plan (JSON) for spark-submit spark/export.py --plan."),
    ] = None,
    follow: Annotated[
        bool, typer.Option(help="Keep exporting what arrives, every --every (Ctrl-C stops).")
    ] = False,
    every: Annotated[str, typer.Option(help="Follow: time between rounds (60s, 5m).")] = "60s",
    rounds: Annotated[
        int, typer.Option(help="Follow: stop after this many rounds (0: never).")
    ] = 0,
    checkpoint: Annotated[
        Path | None,
        typer.Option(help=f"Follow: the checkpoint file (default: {CHECKPOINT} in a local --to)."),
    ] = None,
    master: Master = None,
    jar: Annotated[list[str], typer.Option(help="Jar for spark.jars (repeatable).")] = [],  # noqa: B006
    config: ConfigOption = None,
) -> None:
    """Export a topic's messages (every segment, Kafka and Pulsar) to Parquet partitioned by
    date and hour of produced_at, each message once; re-runs replace the hours they cover."""
    if format not in FORMATS:
        raise typer.BadParameter(f"one of {', '.join(FORMATS)}", param_hint="--format")
    if plan_out is None:
        require_spark()  # before any planning: the run needs Spark, writing the plan does not
    settings = ControlPlaneSettings.load(config)
    now = int(time.time() * 1000)
    since_ms = instant_ms(since, now) if since else None
    until_ms = instant_ms(until, now) if until else None
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise typer.BadParameter("--since must be before --until")
    if follow and (plan_out is not None or until_ms is not None):
        raise typer.BadParameter("--follow exports what arrives: no --plan-out, no --until")
    if follow:
        if checkpoint is None and "://" in to:
            raise typer.BadParameter("a remote --to needs --checkpoint", param_hint="--follow")
        state = checkpoint or Path(to) / CHECKPOINT
        _follow(
            settings, project, topic, to, since_ms, duration_ms(every), rounds, state, master, jar
        )
        return
    planned = _planned(settings, project, topic, whole_hours(since_ms, None)[0])
    if plan_out is not None:
        plan_out.write_text(planned.plan.model_dump_json(indent=2))
        console.print(f"{plan_out}: {len(planned.plan.segments)} segments")
        return
    spark = local.spark_session(settings, master, jar, "httpbus-export")
    _run(spark, planned, project, topic, to, since_ms, until_ms)


def _planned(
    settings: ControlPlaneSettings, project: str, topic: str, since_ms: int | None
) -> PlannedTimeline:
    """The plan, its notes printed; CLI exits on a refusal."""
    try:
        planned = asyncio.run(_plan(settings, project, topic, since_ms))
    except NotFound as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_NOT_FOUND) from None
    except HttpbusError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_REFUSED) from None
    for note in planned.notes:
        console.print(note)
    return planned


def _run(
    spark: Any,
    planned: PlannedTimeline,
    project: str,
    topic: str,
    to: str,
    since_ms: int | None,
    until_ms: int | None,
) -> None:
    from spark.export import export_parquet, write_manifest
    from spark.messages import read_timeline

    result = export_parquet(
        read_timeline(spark, planned.plan), to, since_ms=since_ms, until_ms=until_ms
    )
    write_manifest(to, result, planned.plan.model_dump_json())
    table = Table(title=f"{project}/{topic} → {to} ({result.seconds:.1f}s)")
    table.add_column("hour (UTC)")
    table.add_column("messages", justify="right")
    for hour, count in result.hours.items():
        table.add_row(hour, str(count))
    console.print(table)
    console.print(
        f"{result.messages} messages in {len(result.hours)} hours, "
        f"{result.duplicates} duplicate copies dropped"
    )


def _follow(
    settings: ControlPlaneSettings,
    project: str,
    topic: str,
    to: str,
    since_ms: int | None,
    every_ms: int,
    rounds: int,
    state: Path,
    master: str | None,
    jar: list[str],
) -> None:
    from spark.export import earliest_ms
    from spark.messages import read_timeline
    from spark.plan import after

    spark = local.spark_session(settings, master, jar, "httpbus-export")
    done = 0
    try:
        while True:
            read = _load(state)
            if read is None:  # the first round: the window asked for (default: everything)
                start = whole_hours(since_ms, None)[0]
            else:
                current = _planned(settings, project, topic, None).plan
                start = earliest_ms(read_timeline(spark, after(current, read)))
            if read is None or start is not None:
                start = whole_hours(start, None)[0]
                planned = _planned(settings, project, topic, start)
                _run(spark, planned, project, topic, to, start, None)
                _save(state, ends_of(planned.plan))
            else:
                console.print("nothing new")
            done += 1
            if rounds and done >= rounds:
                return
            time.sleep(every_ms / 1000)  # a CLI loop between rounds; Ctrl-C stops it
    except KeyboardInterrupt:
        console.print("stopped")


def _load(state: Path) -> Ends | None:
    if not state.exists():
        return None
    raw = json.loads(state.read_text())["ends"]
    return {int(s): {int(p): int(e) for p, e in parts.items()} for s, parts in raw.items()}


def _save(state: Path, ends: Ends) -> None:
    state.parent.mkdir(parents=True, exist_ok=True)
    tmp = state.with_suffix(".tmp")
    tmp.write_text(json.dumps({"ends": ends}))
    tmp.replace(state)  # atomic: a round is recorded whole or not at all

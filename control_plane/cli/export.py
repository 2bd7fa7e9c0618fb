"""``httpbus export PROJECT TOPIC --to DIR``: a topic's messages, every segment, to Parquet.

The CLI resolves the timeline from the metastore and the segment stores into a plan
(:mod:`control_plane.export_plan`), then runs the export on Spark (``spark_master``, local[*]
by default; ``spark.export``), or with ``--plan-out`` writes the plan for ``spark-submit
spark/export.py --plan`` on a cluster. See docs/export.md.
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from core.errors import HttpbusError, NotFound
from metastore.catalog import Catalog
from metastore.config import open_metastore
from segments.registry import open_store
from spark.plan import whole_hours

from ..export_plan import PlannedTimeline, clusters_of, plan_timeline
from ..settings import ControlPlaneSettings
from .audit import instant_ms
from .common import EXIT_NOT_FOUND, EXIT_REFUSED
from .dev import ConfigOption

console = Console(soft_wrap=True)
FORMATS = ("parquet",)


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
    project: Annotated[str, typer.Argument(help="The topic's project.")],
    topic: Annotated[str, typer.Argument(help="The topic.")],
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
    master: Annotated[str | None, typer.Option(help="Spark master (default: settings).")] = None,
    jar: Annotated[list[str], typer.Option(help="Jar for spark.jars (repeatable).")] = [],  # noqa: B006
    config: ConfigOption = None,
) -> None:
    """Export a topic's messages (every segment, Kafka and Pulsar) to Parquet partitioned by
    date and hour of produced_at, each message once; re-runs replace the hours they cover."""
    if format not in FORMATS:
        raise typer.BadParameter(f"one of {', '.join(FORMATS)}", param_hint="--format")
    settings = ControlPlaneSettings.load(config)
    now = int(time.time() * 1000)
    since_ms = instant_ms(since, now) if since else None
    until_ms = instant_ms(until, now) if until else None
    if since_ms is not None and until_ms is not None and since_ms >= until_ms:
        raise typer.BadParameter("--since must be before --until")
    try:
        # From the start of since's hour: the export rewrites whole hours.
        planned = asyncio.run(_plan(settings, project, topic, whole_hours(since_ms, None)[0]))
    except NotFound as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_NOT_FOUND) from None
    except HttpbusError as exc:
        console.print(f"[red]{exc}[/red]")
        raise typer.Exit(EXIT_REFUSED) from None
    for note in planned.notes:
        console.print(note)
    plan_json = planned.plan.model_dump_json()
    if plan_out is not None:
        plan_out.write_text(planned.plan.model_dump_json(indent=2))
        console.print(f"{plan_out}: {len(planned.plan.segments)} segments")
        return
    from spark.export import export_parquet, write_manifest
    from spark.messages import read_timeline
    from spark.session import build_session

    spark = build_session(
        master or settings.spark_master, jars=jar or settings.spark_jars, app_name="httpbus-export"
    )
    spark.sparkContext.setLogLevel("ERROR")
    result = export_parquet(
        read_timeline(spark, planned.plan), to, since_ms=since_ms, until_ms=until_ms
    )
    write_manifest(to, result, plan_json)
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

"""``httpbus audit run``: the Spark audit jobs over the audit trail, results in the report store.

The CLI gathers what the trail does not say -- the subscriptions (which topic each reads, since
when) and the sealed segments of every topic (the cutover boundaries) -- from the metastore,
finds the trail (the audit topic on ``audit.cluster``, else the default cluster), runs the jobs
on Spark (``spark_master``, local[*] by default) and stores the results (``database_url``,
migrated to the newest schema first).

Kafka is read by Spark itself (the ``kafka`` source; its jars from ``spark_jars``). Any other
store (the embedded one of ``httpbus dev``, Pulsar) is exported first through its
``SegmentStore`` into text files of events, which Spark reads.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from cli import local
from cli.kit import ConfigOption, Master, duration_ms, instant_ms, require_spark
from control_plane.settings import ControlPlaneSettings
from core.audit import AuditCutover, AuditSubscription, FindingKind, Reconciliation
from core.model import FailoverMode
from metastore.catalog import Catalog
from metastore.config import open_metastore
from reports import migrate
from reports.store import ReportStore
from segments.config import KafkaClusterConfig
from segments.protocol import SegmentStore
from segments.registry import open_store

app = typer.Typer(help="The audit pipeline: reconciliation, hourly report, cutover checks.")
console = Console(soft_wrap=True)  # ids stay on one line, for grep
SHOWN = 20  # ids printed per kind; the store keeps them all


async def _metadata(catalog: Catalog) -> tuple[list[AuditSubscription], list[AuditCutover]]:
    subs: list[AuditSubscription] = []
    cutovers: list[AuditCutover] = []
    for project in await catalog.list_projects():
        for name in await catalog.list_subscriptions(project):
            sub = await catalog.get_subscription(project, name)
            created = int(sub.created_at.timestamp() * 1000)
            subs.append(
                AuditSubscription(
                    name=f"{project}/{name}",
                    topic_project=sub.topic_project,
                    topic=sub.topic,
                    created_at_ms=created,
                    delay_ms=sub.delay_ms,
                    paused=sub.paused,
                )
            )
        for topic in await catalog.list_topics(project):
            cutovers += await switch_boundaries(catalog, project, topic)
    return subs, cutovers


async def switch_boundaries(catalog: Catalog, project: str, topic: str) -> list[AuditCutover]:
    """Every switch of ``topic``'s timeline: a planned cutover at its seal, a failover at the
    moment the old segment was left unsealed (its seal comes later, when its cluster is back)."""
    segments = sorted(await catalog.list_segments(project, topic), key=lambda s: s.id)
    failover = (await catalog.get_topic(project, topic)).failover
    ordered = failover is None or failover.mode is FailoverMode.ORDERED
    out = []
    for old, new in zip(segments, segments[1:], strict=False):
        switched = old.unsealed_at or old.sealed_at
        if switched is None:
            continue
        out.append(
            AuditCutover(
                project=project,
                topic=topic,
                from_segment=old.id,
                to_segment=new.id,
                sealed_at_ms=int(switched.timestamp() * 1000),
                end_positions=old.end_positions or {},
                failover=old.unsealed_at is not None,
                check_order=old.unsealed_at is None or ordered,
            )
        )
    return out


async def export_trail(store: SegmentStore, topic: str, folder: Path) -> int:
    """Write every record of the audit topic as lines of events into ``folder``; the count of
    records."""
    records = 0
    for partition, end in sorted((await store.end_positions(topic)).items()):
        with (folder / f"part-{partition}.jsonl").open("wb") as out:
            start = 0
            while start < end:
                batch = await store.read(topic, partition, start, max_records=2_000, timeout=2.0)
                if not batch:
                    break
                for stored in batch:
                    if stored.value:
                        out.write(stored.value + b"\n")
                records += len(batch)
                start = batch[-1].position + 1
    return records


async def _gather(
    settings: ControlPlaneSettings, folder: Path
) -> tuple[list[AuditSubscription], list[AuditCutover], dict[str, str]]:
    """Subscriptions, cutovers and where Spark finds the trail."""
    subs, cutovers = await _read_metadata(settings)
    cluster = settings.audit.cluster or settings.default_cluster
    config = settings.clusters[cluster]
    topic = settings.audit.topic
    if isinstance(config, KafkaClusterConfig):
        return subs, cutovers, {"kafka": config.bootstrap_servers, "topic": topic}
    async with open_store(config) as store:
        if await store.partitions(topic) is None:
            records = 0
        else:
            records = await export_trail(store, topic, folder)
    console.print(f"exported {records} audit records of {cluster}/{topic}")
    return subs, cutovers, {"files": str(folder)}


def _events(spark: Any, source: dict[str, str]) -> Any:
    from spark.schema import read_files, read_kafka

    if "files" in source:
        return read_files(spark, source["files"])
    return read_kafka(spark, source["kafka"], source["topic"])


def print_summary(run_id: int, rec: Reconciliation, seconds: float) -> None:
    """The reconciliation as a Rich table, then the ids it names."""
    table = Table(title=f"reconciliation run {run_id} ({rec.events} events, {seconds:.1f}s)")
    # Short headers: the subscription names keep the width of an 80-column terminal.
    cols = {
        "expected": "expect",
        "delivered": "deliv",
        "filtered": "filter",
        "dead_lettered": "dlq",
        "late": "late",
        "lost": "lost",
        "pending": "pend",
        "duplicates": "dups",
    }
    table.add_column("subscription", no_wrap=True)
    for header in cols.values():
        table.add_column(header, justify="right")
    for t in rec.tallies:
        table.add_row(t.subscription, *(str(getattr(t, c)) for c in cols))
    console.print(table)
    for kind in (FindingKind.LOST, FindingKind.LATE, FindingKind.DUPLICATE):
        found = [f for f in rec.findings if f.kind is kind]
        if found:
            ids = ", ".join(
                f"{f.subscription}:{f.message_id}" + (f"×{f.count}" if f.count > 1 else "")
                for f in found[:SHOWN]
            )
            more = f" … and {len(found) - SHOWN} more" if len(found) > SHOWN else ""
            console.print(f"[bold]{kind.value}[/bold] ({len(found)}): {ids}{more}")
    style = "red" if rec.total("lost") else "green"
    console.print(
        f"[{style}]lost {rec.total('lost')}[/{style}], late {rec.total('late')}, "
        f"duplicates {rec.total('duplicates')}, pending {rec.total('pending')}, "
        f"unaccepted {rec.unaccepted}"
    )


@app.command()
def run(
    mode: Annotated[str, typer.Option(help="batch (backfill) or streaming (hourly report).")] = (
        "batch"
    ),
    since: Annotated[str, typer.Option(help="Start of the window: RFC 3339 or '24h' ago.")] = "24h",
    until: Annotated[str, typer.Option(help="End of the window: RFC 3339 or '0s' ago.")] = "0s",
    horizon: Annotated[str, typer.Option(help="Time to reach a terminal outcome.")] = "5m",
    checkpoint: Annotated[
        Path, typer.Option(help="Streaming: checkpoint folder (resume point).")
    ] = Path(".httpbus/audit-checkpoint"),
    once: Annotated[bool, typer.Option(help="Streaming: process what is there, then stop.")] = (
        False
    ),
    master: Master = None,
    jar: Annotated[list[str], typer.Option(help="Jar for spark.jars (repeatable).")] = [],  # noqa: B006
    config: ConfigOption = None,
) -> None:
    """Run the audit jobs and store their results; print the reconciliation summary."""
    if mode not in ("batch", "streaming"):
        raise typer.BadParameter("batch or streaming", param_hint="--mode")
    require_spark()
    settings = ControlPlaneSettings.load(config)
    window = _window(since, until, horizon)
    migrate.upgrade(settings.database_url)
    store = ReportStore.from_url(settings.database_url)
    try:
        with tempfile.TemporaryDirectory(prefix="httpbus-audit-") as folder:
            subs, cutovers, source = asyncio.run(_gather(settings, Path(folder)))
            spark = local.spark_session(settings, master, jar, "httpbus-audit")
            if mode == "streaming":
                _stream(spark, settings, source, subs, store, checkpoint, once)
                return
            from spark.jobs import AuditJob, run_batch

            job = AuditJob(subscriptions=subs, cutovers=cutovers, **window)
            out = run_batch(spark, _events(spark, source), job)
        where = ",".join(f"{k}={v}" for k, v in source.items() if k != "files") or "files"
        _store_output(store, out, where, window["as_of_ms"])
    finally:
        store.close()


def _store_output(store: ReportStore, out: Any, source: str, started_ms: int) -> None:
    """Store an ``AuditOutput`` and print its summary."""
    run_id = store.save_reconciliation(
        out.reconciliation,
        mode="batch",
        source=source,
        started_at_ms=started_ms,
        duration_ms=int(out.seconds * 1000),
    )
    store.upsert_hourly(out.hourly)
    store.save_cutovers(out.cutovers)
    print_summary(run_id, out.reconciliation, out.seconds)
    for check in out.cutovers:
        c = check.cutover
        verdict = "[green]ok[/green]" if check.ok else f"[red]{len(check.findings)} findings[/red]"
        console.print(f"cutover {c.project}/{c.topic} {c.from_segment}→{c.to_segment}: {verdict}")


def _window(since: str, until: str, horizon: str) -> dict[str, int]:
    """The window of an ``AuditJob`` in ms (as of now), checked."""
    now = int(time.time() * 1000)
    since_ms, until_ms = instant_ms(since, now), instant_ms(until, now)
    horizon_ms = duration_ms(horizon)
    if since_ms >= until_ms or horizon_ms <= 0:
        raise typer.BadParameter("--since must be before --until, and --horizon > 0")
    return {"since_ms": since_ms, "until_ms": until_ms, "as_of_ms": now, "horizon_ms": horizon_ms}


async def _read_metadata(
    settings: ControlPlaneSettings,
) -> tuple[list[AuditSubscription], list[AuditCutover]]:
    async with open_metastore(settings.metastore) as meta:
        return await _metadata(Catalog(meta))


@app.command()
def job(
    out: Annotated[Path, typer.Option(help="Where to write the job (JSON).")],
    since: Annotated[str, typer.Option(help="Start of the window.")] = "24h",
    until: Annotated[str, typer.Option(help="End of the window.")] = "0s",
    horizon: Annotated[str, typer.Option(help="Time to reach a terminal outcome.")] = "5m",
    config: ConfigOption = None,
) -> None:
    """Write the job for ``spark-submit spark/__main__.py --job``: the
    subscriptions and cutovers of the metastore and the window."""
    require_spark()  # spark.jobs imports pyspark
    from spark.jobs import AuditJob

    settings = ControlPlaneSettings.load(config)
    window = _window(since, until, horizon)
    subs, cutovers = asyncio.run(_read_metadata(settings))
    spec = AuditJob(subscriptions=subs, cutovers=cutovers, **window)
    out.write_text(spec.model_dump_json(indent=2))
    console.print(f"{out}: {len(subs)} subscriptions, {len(cutovers)} cutovers")


@app.command()
def load(
    result: Annotated[Path, typer.Argument(help="The --out of a spark-submit run.", exists=True)],
    config: ConfigOption = None,
) -> None:
    """Store the result of a ``spark-submit`` run and print its summary."""
    require_spark()  # spark.jobs imports pyspark
    from spark.jobs import AuditOutput

    settings = ControlPlaneSettings.load(config)
    try:
        out = AuditOutput.model_validate_json(result.read_bytes())
    except ValueError:
        raise typer.BadParameter("not an audit result (AuditOutput JSON)") from None
    migrate.upgrade(settings.database_url)
    store = ReportStore.from_url(settings.database_url)
    try:
        _store_output(store, out, f"spark-submit:{result.name}", int(time.time() * 1000))
    finally:
        store.close()


def _stream(
    spark: Any,
    settings: ControlPlaneSettings,
    source: dict[str, str],
    subs: list[AuditSubscription],
    store: ReportStore,
    checkpoint: Path,
    once: bool,
) -> None:
    from spark.hourly import start_hourly_stream
    from spark.reconcile import subscriptions_frame
    from spark.schema import stream_kafka

    if "kafka" not in source:
        raise typer.BadParameter("streaming reads the Kafka audit topic", param_hint="--mode")
    events = stream_kafka(spark, source["kafka"], source["topic"])
    query = start_hourly_stream(
        events,
        subscriptions_frame(spark, subs),
        str(checkpoint),
        store.upsert_hourly,
        trigger_s=None if once else 60.0,
    )
    console.print(f"streaming the hourly report (checkpoint {checkpoint}); Ctrl-C stops")
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()

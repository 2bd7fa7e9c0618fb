"""``httpbus audit run`` on the embedded backends of ``httpbus dev``: the trail written by the
real AuditSink into the embedded store is exported to files, Spark reads them, the summary is
printed with the planted lost message and duplicate named, and the run is stored (migrated
first) with its findings; ``httpbus db current|downgrade|upgrade`` work on the same database.
The CLI's Spark session is the shared test session (``getOrCreate``)."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from cli import cli
from core.audit import AuditEvent, AuditType
from core.model import (
    Project,
    Topic,
)
from metastore.catalog import Catalog
from metastore.config import EmbeddedMetaStoreConfig, open_metastore
from reports import migrate
from reports.store import ReportStore
from segments.audit import AuditSink
from segments.config import EmbeddedClusterConfig
from segments.registry import open_store
from tests.support.world import segment, subscription


async def _setup(tmp_path: Path, now_ms: int) -> dict[str, Any]:
    meta_cfg = EmbeddedMetaStoreConfig(path=str(tmp_path / "metastore.db"))
    store_cfg = EmbeddedClusterConfig(path=str(tmp_path / "segments.db"))
    async with open_metastore(meta_cfg) as meta, open_store(store_cfg) as store:
        catalog = Catalog(meta)
        await catalog.create_project(Project(name="shop"))
        seg = segment("embedded", storage="t1", partitions=1)
        await catalog.create_topic(Topic(project="shop", name="orders"), seg)
        await catalog.create_subscription(
            subscription(
                "billing",
                project="shop",
                topic_project="shop",
                topic="orders",
                created_at=datetime.fromtimestamp((now_ms - 3_600_000) / 1000, UTC),
            )
        )
        async with AuditSink(store, "httpbus.audit") as sink:
            for i in range(50):
                at = now_ms - 600_000 + i
                common = {"project": "shop", "topic": "orders", "message_id": f"m{i}"}
                sink.emit(AuditEvent(type=AuditType.ACCEPTED, at_ms=at, **common))
                if i == 7:
                    continue  # planted: never delivered
                for n in range(2 if i == 9 else 1):  # planted: delivered twice
                    sink.emit(
                        AuditEvent(
                            type=AuditType.DELIVERED,
                            subscription="shop/billing",
                            at_ms=at + 10 + n,
                            status=200,
                            **common,
                        )
                    )
    return {
        "metastore": meta_cfg.model_dump(),
        "clusters": {"embedded": store_cfg.model_dump()},
        "database_url": f"sqlite:///{tmp_path}/reports.db",
    }


def test_audit_run_on_the_embedded_trail(tmp_path: Path, spark: Any) -> None:
    settings = asyncio.run(_setup(tmp_path, int(time.time() * 1000)))
    config = tmp_path / "cp.yaml"
    config.write_text(yaml.safe_dump(settings))
    runner = CliRunner()
    result = runner.invoke(
        cli, ["audit", "run", "--config", str(config), "--since", "2h", "--horizon", "1m"]
    )
    assert result.exit_code == 0, result.output
    assert "lost (1): shop/billing:m7" in result.output
    assert "duplicate (1): shop/billing:m9×2" in result.output
    store = ReportStore.from_url(settings["database_url"])
    (run,) = store.runs()
    assert (run.expected, run.lost, run.duplicates, run.pending) == (50, 1, 1, 0)
    full = store.run(run.id)
    assert full is not None
    assert sorted((f.kind, f.message_id) for f in full.findings) == [
        ("duplicate", "m9"),
        ("lost", "m7"),
    ]
    assert sum(r.delivered for r in store.hourly(subscription="shop/billing")) == 50
    store.close()
    url = ["--url", settings["database_url"]]
    head = f"at {migrate.head()}"
    assert head in runner.invoke(cli, ["db", "current", *url]).output
    down = runner.invoke(cli, ["db", "downgrade", "base", *url])
    assert "base (empty)" in down.output, down.output
    assert head in runner.invoke(cli, ["db", "upgrade", *url]).output


def test_durations_and_instants() -> None:
    import pytest
    import typer

    from cli.kit import duration_ms, instant_ms

    assert [duration_ms(t) for t in ("90", "90s", "15m", "2h", "1d", "500ms")] == [
        90_000,
        90_000,
        900_000,
        7_200_000,
        86_400_000,
        500,
    ]
    assert instant_ms("2h", 10_000_000) == 2_800_000
    assert instant_ms("2026-11-22T00:00:00Z", 0) == 1_795_305_600_000
    with pytest.raises(typer.BadParameter, match="duration"):
        duration_ms("soon")
    with pytest.raises(typer.BadParameter, match="time zone"):
        instant_ms("2026-11-22T00:00:00", 0)


def test_the_spark_submit_flow_job_submit_load(tmp_path: Path, spark: Any) -> None:
    """``audit job`` writes the job from the metastore, the spark-submit entry point runs it on
    exported files, ``audit load`` stores the result: the same findings as ``audit run``."""
    from cli.audit import export_trail
    from spark.__main__ import main as submit

    settings = asyncio.run(_setup(tmp_path, int(time.time() * 1000)))
    config = tmp_path / "cp.yaml"
    config.write_text(yaml.safe_dump(settings))
    runner = CliRunner()
    job = tmp_path / "job.json"
    made = runner.invoke(cli, ["audit", "job", "--config", str(config), "--out", str(job)])
    assert made.exit_code == 0 and "1 subscriptions" in made.output, made.output
    files = tmp_path / "trail"
    files.mkdir()

    async def export() -> int:
        async with open_store(EmbeddedClusterConfig(**settings["clusters"]["embedded"])) as s:
            return await export_trail(s, "httpbus.audit", files)

    assert asyncio.run(export()) >= 1
    result = tmp_path / "result.json"
    assert submit(["--job", str(job), "--files", str(files), "--out", str(result)]) == 0
    loaded = runner.invoke(cli, ["audit", "load", str(result), "--config", str(config)])
    assert loaded.exit_code == 0, loaded.output
    assert "lost (1): shop/billing:m7" in loaded.output
    store = ReportStore.from_url(settings["database_url"])
    (run,) = store.runs()
    assert (run.source, run.lost, run.duplicates) == ("spark-submit:result.json", 1, 1)
    store.close()
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    refused = runner.invoke(cli, ["audit", "load", str(bad), "--config", str(config)])
    assert refused.exit_code == 2 and "not an audit result" in refused.output

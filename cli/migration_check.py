"""``httpbus topic migration check``: a local job, the window check of a verified migration
on Spark (local by default, like ``httpbus export``) against the metastore and the storage
clusters of the configuration. It stores the windows on the migration; with ``--follow`` it
repeats every ``--every`` and prints a line per round. Needs the ``httpbus[spark]`` extra.
"""

from __future__ import annotations

import asyncio
import time
from typing import Annotated, Any

import typer

from cli import local
from cli.kit import (
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    ConfigOption,
    Master,
    fail,
    require_spark,
)
from cli.local import LocalProject, LocalTopic
from cli.migration import print_migration, summary
from control_plane.leaders.migration_check import compare, plan_with, store_with
from control_plane.services.topic_migrations import view
from control_plane.settings import ControlPlaneSettings
from core.errors import HttpbusError, NotFound


def check(
    project: LocalProject,
    topic: LocalTopic,
    follow: Annotated[
        bool, typer.Option(help="Repeat every --every (the streaming variant; Ctrl-C stops).")
    ] = False,
    rerun: Annotated[
        bool, typer.Option(help="Judge every window again (closed ones are kept otherwise).")
    ] = False,
    every: Annotated[float, typer.Option(min=0.5, help="Follow: seconds between rounds.")] = 5.0,
    rounds: Annotated[int, typer.Option(min=0, help="Follow: stop after N rounds (0: never).")] = 0,
    master: Master = None,
    config: ConfigOption = None,
) -> None:
    """Compare both sides of the migration window by window (Spark) and store the windows."""
    require_spark()
    settings = ControlPlaneSettings.load(config)
    spark = local.spark_session(settings, master, [], app_name="httpbus-migration-check")
    done = 0
    try:
        while True:
            found = _round(spark, settings, project, topic, rerun=rerun and done == 0)
            typer.echo(f"round {done + 1}: {summary(found)}")
            done += 1
            if not follow or (rounds and done >= rounds):
                print_migration(found)
                return
            time.sleep(every)  # a CLI loop between rounds; Ctrl-C stops it
    except KeyboardInterrupt:
        typer.echo("stopped")


def _round(
    spark: Any, settings: ControlPlaneSettings, project: str, topic: str, *, rerun: bool
) -> dict[str, Any]:
    """One round of the check: the migration as stored after it, as the API shows it."""
    try:
        sides = asyncio.run(
            plan_with(settings.metastore, settings.clusters, project, topic, rerun=rerun)
        )
        windows = compare(spark, sides)
        stored = asyncio.run(
            store_with(
                settings.metastore, sides, windows, rerun=rerun, database_url=settings.database_url
            )
        )
    except NotFound as exc:
        raise fail(str(exc), EXIT_NOT_FOUND) from None
    except HttpbusError as exc:
        raise fail(str(exc), EXIT_REFUSED) from None
    return view(stored)

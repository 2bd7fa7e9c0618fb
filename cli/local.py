"""What the local jobs share (``audit``, ``export``, ``topic migration check``, ``db``): they
read the deployment's settings file and work on the metastore, the storage clusters and the
report database themselves, instead of asking the control plane; the Spark ones start a
session here. See :mod:`cli` for which commands are local jobs."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from cli.kit import require_spark
from control_plane.settings import ControlPlaneSettings
from core.names import check_name


def _name(value: str) -> str:
    """A name a local job takes to the metastore itself (no API to refuse it): checked here,
    so ``'../x'`` is a usage error (exit 2), not a traceback."""
    try:
        return check_name(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


LocalProject = Annotated[str, typer.Argument(help="Project name.", callback=_name)]
LocalTopic = Annotated[str, typer.Argument(help="Topic name.", callback=_name)]


def spark_session(
    settings: ControlPlaneSettings, master: str | None, jars: list[str], app_name: str
) -> Any:
    """A Spark session on ``master`` (default: the settings' ``spark_master``) with ``jars``
    (default: ``spark_jars``), quiet but for errors. Exit 5 without pyspark."""
    require_spark()
    from spark.session import build_session  # imports pyspark: the httpbus[spark] extra

    spark = build_session(
        master or settings.spark_master, jars=jars or settings.spark_jars, app_name=app_name
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark

"""The Spark session of the audit jobs: local by default, a cluster under ``spark-submit``."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence

from spark import require_spark

require_spark()  # every Spark run starts here: say how to install it, not just that it is missing

from pyspark.sql import SparkSession  # noqa: E402

DEFAULT_CONFIG: dict[str, str] = {
    # Audit frames are small per key: the default 200 shuffle partitions cost more in task
    # scheduling than they save on a few cores.
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.adaptive.enabled": "true",
}


def build_session(
    master: str | None = "local[*]",
    *,
    jars: Sequence[str] = (),
    app_name: str = "httpbus-audit",
    config: Mapping[str, str] | None = None,
) -> SparkSession:
    """A session (the active one if it exists). ``jars`` are local jar paths passed as
    ``spark.jars`` -- the Kafka connector, resolved once by ``scripts.realservices fetch``;
    nothing is downloaded at run time. ``master`` None leaves it to ``spark-submit``.

    A local master runs its Python workers on this interpreter, not on the ``python3`` of the
    PATH (pyspark's default, which may lack our packages): the reader of Pulsar segments runs
    pulsar-client in them (``spark.messages``)."""
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    settings = {**DEFAULT_CONFIG, **(config or {})}
    if jars:
        settings["spark.jars"] = ",".join(jars)
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if master and master.startswith("local"):
        session.sparkContext.pythonExec = sys.executable
    return session


def describe(spark: SparkSession) -> dict[str, str]:
    """The settings worth printing next to a timing."""
    conf = spark.sparkContext.getConf()
    keys = ["spark.master", "spark.driver.memory", "spark.sql.shuffle.partitions"]
    keys += ["spark.sql.adaptive.enabled", "spark.default.parallelism"]
    out = {key: conf.get(key, "(default)") for key in keys}
    out["spark.version"] = spark.version
    out["cores"] = str(spark.sparkContext.defaultParallelism)
    return out

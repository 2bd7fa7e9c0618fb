"""PySpark jobs: the audit pipeline over the audit trail, and the segment-aware reader of a
topic's messages (``spark.messages``) with the Parquet export built on it (``spark.export``).

Owns the reconciliation (accepted vs terminal outcomes, duplicates), the hourly report and the
cutover verification, in batch and streaming mode. Imports only ``core``.
"""

from __future__ import annotations

import importlib.util

# The services run without pyspark (pip install httpbus); the Spark jobs need the extra.
INSTALL_HINT = (
    "Spark is not installed: pip install 'httpbus[spark]' (make install includes it; "
    "on Kubernetes the chart runs the Spark jobs on the Spark image, docs/deploy.md)"
)


class SparkMissing(ImportError):
    """pyspark is not installed: raised by :func:`require_spark` with :data:`INSTALL_HINT`."""

    def __init__(self) -> None:
        super().__init__(INSTALL_HINT, name="pyspark")


def require_spark() -> None:
    """Raise :class:`SparkMissing` unless pyspark can be imported: the first call of every
    command that runs Spark, so a service install says how to get it instead of failing with
    ``No module named 'pyspark'`` deep inside a job. Example::

        require_spark()
        from spark.session import build_session
    """
    if importlib.util.find_spec("pyspark") is None:
        raise SparkMissing()

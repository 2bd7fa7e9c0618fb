"""One local[2] SparkSession for the whole test session: starting a JVM costs seconds."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from httpbus.core.audit import AuditEvent, AuditType

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from httpbus.spark.session import build_session

    session = build_session(
        "local[2]",
        app_name="httpbus-unit-tests",
        config={"spark.sql.shuffle.partitions": "2", "spark.default.parallelism": "2"},
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    # Left running on purpose: other test modules of the session (integration) reuse it, and
    # the JVM ends with the process.


T0 = 1_700_000_000_000  # ms
SUB = "shop/billing"


def ev(kind: AuditType, mid: str, at: int, **kw: Any) -> AuditEvent:
    base: dict[str, Any] = {"project": "shop", "topic": "orders", "at_ms": T0 + at}
    if kind is not AuditType.ACCEPTED:
        base["subscription"] = SUB
    return AuditEvent(type=kind, message_id=mid, **{**base, **kw})


def frame(spark: Any, events: list[AuditEvent], records_of: int = 7) -> Any:
    """The events packed as the sink packs them (JSON lines, many per record value), read back
    through the same parser as the Kafka source."""
    from httpbus.spark.schema import events_from_values

    lines = [e.to_bytes() for e in events]
    values = [(b"\n".join(lines[i : i + records_of]),) for i in range(0, len(lines), records_of)]
    return events_from_values(spark.createDataFrame(values, "value binary"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # py4j leaves the sockets of collected results to the garbage collector (a known pyspark
    # trait, not ours): their ResourceWarning must not fail the Spark tests.
    mark = pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
    for item in items:
        if "/unit/spark/" in str(item.fspath):
            item.add_marker(mark)

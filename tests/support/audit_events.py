"""Helpers of the Spark job tests; the shared session is the ``spark`` fixture of
tests/conftest.py."""

from __future__ import annotations

from typing import Any

import pytest

from core.audit import AuditEvent, AuditType

pyspark = pytest.importorskip("pyspark")


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
    from spark.schema import events_from_values

    lines = [e.to_bytes() for e in events]
    values = [(b"\n".join(lines[i : i + records_of]),) for i in range(0, len(lines), records_of)]
    return events_from_values(spark.createDataFrame(values, "value binary"))

"""Sample audit events for the tests of the audit sink (``segments.audit.AuditSink``), the
same on the embedded store (tests/unit/segments/test_audit.py) and on Kafka
(tests/integration/test_audit_kafka.py)."""

from __future__ import annotations

from core.audit import AuditEvent, AuditType

TYPES = list(AuditType)


def nth_event(i: int, messages: int = 100, error: str | None = None) -> AuditEvent:
    """The i-th event: ``messages`` messages, each with a run of events of every type; every
    field the trail carries is set, and some errors hold what a JSON line must escape."""
    if error is None and i % 7 == 0:
        error = "boom ✓\nline 2"
    elif error is None and i % 11 == 0:
        error = "é\x00\n"
    return AuditEvent(
        type=TYPES[i % len(TYPES)],
        message_id=f"msg-{i % messages}",
        project="shop",
        topic="orders",
        subscription="billing",
        segment=3,
        partition=i % 4,
        position=i,
        at_ms=1_700_000_000_000 + i,
        attempt=i,
        status=200 if i % 3 else 503,
        error=error,
    )

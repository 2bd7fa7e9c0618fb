"""The publish path's ``accepted`` event, encoded without pydantic, is byte for byte what
:class:`core.audit.AuditEvent` makes of the same fields: the Spark jobs, the trace and the
audit readers see no difference."""

from __future__ import annotations

from typing import Any

import pytest

from core.audit import AuditEvent, AuditType, accepted_event

BASE: dict[str, Any] = {
    "message_id": "01JF3Q4Z0000000000000000AB",
    "project": "shop",
    "topic": "orders",
    "segment": 3,
    "partition": 0,
    "position": 0,
    "at_ms": 1_764_000_000_123,
    "size": 0,
}


@pytest.mark.parametrize(
    "extra",
    [
        {"group": None, "due_at_ms": None, "headers": None},
        {"group": "g-1", "due_at_ms": 1_764_000_060_000, "headers": {"x-a": "b"}},
        {"group": "", "due_at_ms": 0, "headers": {}},
        {
            "group": 'q"uote\\slash',
            "due_at_ms": None,
            "headers": {"x-ü": "naïve \u2028 ✓ 🚀", "content-type": 'text/plain; a="b"'},
        },
    ],
)
def test_the_encoded_event_is_the_models_bytes(extra: dict[str, Any]) -> None:
    fields = {**BASE, **extra}
    encoded = accepted_event(**fields)
    model = AuditEvent(type=AuditType.ACCEPTED, produced_at_ms=fields["at_ms"], **fields)
    assert encoded.to_bytes() == model.to_bytes()
    assert AuditEvent.from_bytes(encoded.to_bytes()) == model
    assert encoded.message_id == fields["message_id"]

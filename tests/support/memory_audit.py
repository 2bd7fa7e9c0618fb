"""An audit sink in memory, for the tests that read what a runner emits: it keeps the events
(of ``types`` only, if given) and is always durable, so commits are never held back."""

from __future__ import annotations

from collections.abc import Collection

from core.audit import AuditEvent, AuditType


class MemoryAudit:
    def __init__(self, types: Collection[AuditType] | None = None) -> None:
        self.types = types
        self.events: list[AuditEvent] = []

    def emit(self, event: AuditEvent) -> None:
        if self.types is None or event.type in self.types:
            self.events.append(event)

    def mark(self) -> int:
        return len(self.events)

    async def durable(self, mark: int) -> bool:
        return True

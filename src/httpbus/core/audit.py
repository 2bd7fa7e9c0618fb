"""Audit events: what happened to every message, for the Spark reconciliation.

Producers and workers append one event per step to the internal audit topic, one compact
JSON object each, keyed by message id. The schema is versioned by ``v``; a reader accepts
every version up to its own and ignores fields it does not know.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

SCHEMA_VERSION = 1


class AuditType(StrEnum):
    ACCEPTED = "accepted"
    ATTEMPTED = "attempted"
    DELIVERED = "delivered"
    FILTERED = "filtered"
    RETRIED = "retried"
    DEAD_LETTERED = "dead_lettered"
    UNSIDELINED = "unsidelined"
    CIRCUIT = "circuit"  # a subscription's circuit changed state; message_id is ""


class AuditEvent(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    v: int = SCHEMA_VERSION
    type: AuditType
    message_id: str
    project: str
    topic: str
    subscription: str | None = None
    segment: int | None = None
    partition: int | None = None
    position: int | None = None
    group: str | None = None
    at_ms: int = Field(description="when the event happened (ms since the epoch)")
    produced_at_ms: int | None = None
    size: int | None = None
    status: int | None = None
    attempt: int | None = None
    error: str | None = None
    circuit_from: str | None = None
    circuit_to: str | None = None
    reason: str | None = None
    failure_rate: float | None = None

    def to_bytes(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> AuditEvent:
        return cls.model_validate_json(data)

"""Audit events: what happened to every message, for the Spark reconciliation.

Producers and workers append one event per step to the internal audit topic, one compact
JSON object each, keyed by message id. The schema is versioned by ``v``; a reader accepts
every version up to its own and ignores fields it does not know.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

import orjson
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
    RESENT = "resent"  # an operator resent the message to one subscription (it is read again)
    RECOVERED = "recovered"  # an operator recovered it from the DLQ by its failure time
    REPLAYED = "replayed"  # an operator replayed a window of the topic to one subscription
    CIRCUIT = "circuit"  # a subscription's circuit changed state; message_id is ""
    PAUSED = "paused"  # a worker saw its subscription paused; message_id is ""
    RESUMED = "resumed"  # ... and resumed
    DISABLED = "disabled"  # a worker disabled its subscription (failing endpoint); id ""
    ENABLED = "enabled"  # a worker saw its disabled subscription enabled again; id ""
    FAILOVER = "failover"  # the leader failed a topic's segment over (issue 20); id ""


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
    due_at_ms: int | None = Field(
        default=None,
        description="accepted: its X-Deliver-At; retried: when its next attempt is due",
    )
    size: int | None = None
    status: int | None = None
    attempt: int | None = None
    error: str | None = None
    circuit_from: str | None = None
    circuit_to: str | None = None
    reason: str | None = None
    failure_rate: float | None = None
    failing_since_ms: int | None = Field(
        default=None, description="disabled: the first failed attempt after the last success"
    )
    latency_ms: float | None = Field(default=None, description="attempted: the attempt's latency")
    answer: str | None = Field(
        default=None, description="attempted: the first characters of the endpoint's answer"
    )
    level_ms: int | None = Field(
        default=None, description="retried: the delay level the message waits in"
    )
    headers: dict[str, str] | None = Field(
        default=None, description="accepted: the headers the client sent with the message"
    )
    shard: str | None = Field(
        default=None,
        description="circuit, paused, resumed: the shard of a sharded subscription, 'k/N' "
        "(core.shards.Shard.label); absent: the whole subscription",
    )

    def to_bytes(self) -> bytes:
        return self.model_dump_json(exclude_none=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> AuditEvent:
        return cls.model_validate_json(data)


class Encoded(NamedTuple):
    """An event already in its line's bytes (what :meth:`AuditEvent.to_bytes` gives for the
    same fields), for a sink that takes either."""

    message_id: str
    line: bytes

    def to_bytes(self) -> bytes:
        return self.line


def accepted_event(
    *,
    message_id: str,
    project: str,
    topic: str,
    segment: int,
    partition: int,
    position: int,
    group: str | None,
    at_ms: int,
    size: int,
    due_at_ms: int | None,
    headers: dict[str, str] | None,
) -> Encoded:
    """The ``accepted`` event of a published message, encoded as :class:`AuditEvent` would
    encode it (the same fields in the same order, none left out but the empty ones): every
    publish makes one, and an :class:`AuditEvent` built and dumped costs ~7 µs against
    ~1 µs here (`bench/README.md`). ``produced_at_ms`` is ``at_ms``."""
    fields: dict[str, object] = {
        "v": SCHEMA_VERSION,
        "type": "accepted",
        "message_id": message_id,
        "project": project,
        "topic": topic,
        "segment": segment,
        "partition": partition,
        "position": position,
    }
    if group is not None:
        fields["group"] = group
    fields["at_ms"] = fields["produced_at_ms"] = at_ms
    if due_at_ms is not None:
        fields["due_at_ms"] = due_at_ms
    fields["size"] = size
    if headers is not None:
        fields["headers"] = headers
    return Encoded(message_id, orjson.dumps(fields))


# ---------------------------------------------------------------- what the audit jobs report
# Shared by the Spark jobs (which compute them), the relational store (which keeps them) and the
# control plane (which serves them): plain values, so neither side imports the other.

TERMINAL_TYPES = frozenset({AuditType.DELIVERED, AuditType.FILTERED, AuditType.DEAD_LETTERED})
"""The outcomes that end a message's trail for one subscription."""


class FindingKind(StrEnum):
    LOST = "lost"  # no terminal event, and the horizon has passed
    LATE = "late"  # a terminal event, but after the horizon
    DUPLICATE = "duplicate"  # delivered more than once
    MISPLACED = "misplaced"  # cutover: accepted on the wrong side of the seal
    ORDER = "order"  # cutover: a group delivered out of its produce order across the boundary


class AuditSubscription(BaseModel):
    """A subscription as the reconciliation sees it: ``name`` is ``project/subscription`` (as
    in the events), it expects every message accepted on its topic from ``created_at_ms`` on."""

    model_config = ConfigDict(frozen=True)

    name: str
    topic_project: str
    topic: str
    created_at_ms: int = 0
    delay_ms: int = 0  # the subscription's delay: nothing is due before accepted + delay
    paused: bool = False  # paused when the job ran: what it has not delivered is pending


class AuditCutover(BaseModel):
    """A sealed segment and its successor: the boundary a cutover verification checks."""

    model_config = ConfigDict(frozen=True)

    project: str
    topic: str
    from_segment: int
    to_segment: int
    sealed_at_ms: int  # the switch: for a failover, when the old segment was left unsealed
    end_positions: dict[int, int] = Field(default_factory=dict)
    # A failover switch (docs/failover.md); in ``available`` mode order across it may break
    # by design, so ``check_order`` is off there.
    failover: bool = False
    check_order: bool = True


class Finding(BaseModel):
    model_config = ConfigDict(frozen=True)

    kind: FindingKind
    subscription: str | None
    message_id: str
    accepted_at_ms: int | None = None
    terminal_at_ms: int | None = None
    count: int = 1  # deliveries, for a duplicate
    detail: str = ""


class SubscriptionTally(BaseModel):
    """One subscription's reconciliation counts."""

    model_config = ConfigDict(frozen=True)

    subscription: str
    expected: int = 0
    delivered: int = 0
    filtered: int = 0
    dead_lettered: int = 0
    late: int = 0
    lost: int = 0
    pending: int = 0  # no terminal event yet, still inside the horizon
    duplicates: int = 0  # deliveries beyond the first


class Reconciliation(BaseModel):
    """A reconciliation run: counts per subscription, and the findings (ids listed)."""

    since_ms: int
    until_ms: int
    as_of_ms: int
    horizon_ms: int
    events: int = 0  # distinct events read
    unaccepted: int = 0  # terminal outcomes of messages with no accepted event in the trail
    tallies: list[SubscriptionTally] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)

    def total(self, field: str) -> int:
        return sum(int(getattr(t, field)) for t in self.tallies)


class HourlyRow(BaseModel):
    """One subscription in one tumbling window."""

    model_config = ConfigDict(frozen=True)

    window_start_ms: int
    window_end_ms: int
    subscription: str
    accepted: int = 0
    attempted: int = 0
    delivered: int = 0
    filtered: int = 0
    retried: int = 0
    dead_lettered: int = 0
    failed_attempts: int = 0
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    latency_p99_ms: float | None = None

    @property
    def failure_rate(self) -> float | None:
        """Failed attempts over attempts (None when nothing was attempted)."""
        return self.failed_attempts / self.attempted if self.attempted else None


class CutoverCheck(BaseModel):
    """The verification of one cutover boundary."""

    cutover: AuditCutover
    old_segment_messages: int = 0
    new_segment_messages: int = 0
    groups_across: int = 0  # groups with messages on both sides
    findings: list[Finding] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings

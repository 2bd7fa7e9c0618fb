"""The audit events of one subscription's deliveries, as the audit trail stores them.

A message read from the consume segment is named by its segment, partition and position and
its production time; one read from an internal topic (a retry level, the hold topic, the
replay topic) carries its hand-off time instead, so it is named by its id and group only.
"""

from __future__ import annotations

import time

from core.audit import AuditEvent, AuditType
from core.envelope import Envelope
from core.model import Segment, Subscription
from core.shards import WHOLE, Shard
from segments.audit import AuditSink
from segments.protocol import Stored

from .items import Item, Kind


class SubscriptionAudit:
    """Emits the events of ``sub`` to ``sink`` (None: no audit trail, every call is free).
    ``segment`` is the consume segment being read, set by the intake."""

    def __init__(self, sink: AuditSink | None, sub: Subscription) -> None:
        self.sink = sink
        self.sub = sub
        self.segment: Segment | None = None

    def message(
        self, kind: AuditType, msg: Stored, segment: Segment | None = None, **extra: object
    ) -> None:
        """An event of ``msg``; ``segment`` when it was read from that consume segment."""
        if self.sink is None:
            return
        envelope = Envelope.of(msg.headers)
        if segment is not None:  # a record of a retry level carries its hand-off time instead
            extra.setdefault("produced_at_ms", msg.timestamp_ms)
        sub = self.sub
        self.sink.emit(
            AuditEvent(
                type=kind,
                message_id=envelope.message_id or "?",
                project=sub.topic_project,
                topic=sub.topic,
                subscription=f"{sub.project}/{sub.name}",
                segment=segment.id if segment is not None else None,
                partition=msg.partition if segment is not None else None,
                position=msg.position if segment is not None else None,
                group=envelope.group or None,
                at_ms=int(time.time() * 1000),
                **extra,
            )
        )

    def item(self, kind: AuditType, item: Item, **extra: object) -> None:
        """An event of an item on its way (a fresh one names its consume segment)."""
        self.message(kind, item.msg, self.segment if item.kind is Kind.FRESH else None, **extra)


def pause_event(sub: Subscription, index: int | None) -> AuditEvent:
    """The subscription (its shard ``index``) is paused, or running again after a pause."""
    # An assignment that does not match the subscription's shards names no shard: the
    # event then covers the whole subscription (lenient: never a false loss).
    shard = Shard(index, sub.shards) if index is not None and index < sub.shards else WHOLE
    return AuditEvent(
        type=AuditType.PAUSED if sub.paused else AuditType.RESUMED,
        message_id="",
        project=sub.topic_project,
        topic=sub.topic,
        subscription=f"{sub.project}/{sub.name}",
        at_ms=int(time.time() * 1000),
        shard=shard.label,
    )

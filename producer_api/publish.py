"""Publishing: validate, limit, write durably, audit. HTTP-free, so it is easy to test."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

from core import telemetry
from core.audit import AuditEvent, AuditType
from core.errors import HttpbusError, StorageUnavailable, TooLarge
from core.ids import new_message_ids
from core.model import Topic
from segments.audit import AuditSink
from segments.protocol import Record
from segments.writer import SegmentWriter, Written

from . import headers
from .limits import TopicLimits
from .metadata import TopicCache
from .schemas import stamp

if TYPE_CHECKING:
    from .cutover import Gate
    from .quotas import ProjectQuotas


class Accepted(NamedTuple):
    """Where a message was stored (a tuple: a batch makes one per message)."""

    message_id: str
    segment: int
    partition: int
    position: int


@dataclass(slots=True)
class Draft:
    """One message of a request, before validation (not frozen: a batch makes one per
    message, and a frozen dataclass costs a ``setattr`` call per field)."""

    payload: bytes
    headers: Sequence[tuple[str, str]]
    content_type: str | None


class Publisher:
    def __init__(
        self,
        cache: TopicCache,
        writer: SegmentWriter,
        audit: AuditSink | None,
        *,
        rules: headers.HeaderRules = headers.DEFAULT_RULES,
        gates: dict[tuple[str, str], Gate] | None = None,
        quotas: ProjectQuotas | None = None,
    ) -> None:
        self.quotas = quotas  # per-project quotas over all producers (None: not enforced)
        self.gates: dict[tuple[str, str], Gate] = {} if gates is None else gates
        self.cache = cache
        self.writer = writer
        self.audit = audit
        self.limits = TopicLimits()
        self.rules = rules

    def _record(self, topic: Topic, draft: Draft, now_ms: int) -> tuple[Record, headers.Parsed]:
        if len(draft.payload) > topic.max_message_bytes:
            raise _too_large(topic, len(draft.payload))
        parsed = headers.parse(
            draft.headers,
            draft.content_type,
            grouped=topic.grouped,
            rules=self.rules,
            now_ms=now_ms,
        )
        problem = headers.size_problem(
            len(draft.payload), parsed, topic.max_message_bytes, self.rules
        )
        if problem is not None:
            raise problem
        schema = self.cache.schema(topic.project, topic.name)
        if schema is not None:
            stamped = stamp(schema, draft.payload, parsed)
            if not isinstance(stamped, headers.Parsed):
                raise stamped
            parsed = stamped
        key = parsed.group_id.encode() if parsed.group_id is not None else None
        return Record(draft.payload, key=key, headers=parsed.headers, timestamp_ms=now_ms), parsed

    async def publish(self, project: str, name: str, draft: Draft) -> Accepted:
        """Store one message durably, or raise (nothing acknowledged, nothing half-done)."""
        started_ns = time.time_ns()
        topic = await self.cache.topic(project, name)
        now_ms = started_ns // 1_000_000
        record, parsed = self._record(topic, draft, now_ms)
        size = len(draft.payload) + parsed.header_bytes
        if self.quotas is None:
            self.limits.check(topic, 1, size)
        else:
            await self.quotas.admit(topic, 1, size, self.limits)
        gate = self.gates.get((project, name))  # only topics in a cutover have one
        if gate is None:
            written = await self.writer.write(topic, record)
        else:
            written = await gate.write(self.writer, topic, record)
        return self._accepted(topic, parsed, written, len(draft.payload), now_ms, started_ns)

    async def publish_many(
        self, project: str, name: str, drafts: Sequence[Draft]
    ) -> list[Accepted | HttpbusError]:
        """Store many messages; a result per message, in order."""
        started_ns = time.time_ns()
        topic = await self.cache.topic(project, name)
        now_ms = started_ns // 1_000_000
        parser = headers.BatchParser(grouped=topic.grouped, rules=self.rules, now_ms=now_ms)
        schema = self.cache.schema(project, name)
        limit = topic.max_message_bytes
        # The refused ones now; each valid one's slot is filled below from its write's outcome.
        results: list[Accepted | HttpbusError | None] = []
        valid: list[tuple[int, headers.Parsed, int]] = []
        records: list[Record] = []
        total = 0
        # One lock and one encoding for the batch's ids (a client's own id leaves one unused).
        new_ids = new_message_ids(len(drafts), now_ms)
        for index, draft in enumerate(drafts):
            size = len(draft.payload)
            parsed = (
                _too_large(topic, size)
                if size > limit
                else parser.parse(draft.headers, draft.content_type, new_ids[index])
            )
            if isinstance(parsed, headers.Parsed):
                parsed = headers.size_problem(size, parsed, limit, self.rules) or parsed
            if schema is not None and isinstance(parsed, headers.Parsed):
                parsed = stamp(schema, draft.payload, parsed)
            if isinstance(parsed, HttpbusError):
                results.append(parsed)
                continue
            results.append(None)
            valid.append((index, parsed, size))
            key = parsed.group_id.encode() if parsed.group_id is not None else None
            records.append(
                Record(draft.payload, key=key, headers=parsed.headers, timestamp_ms=now_ms)
            )
            total += size + parsed.header_bytes  # a message's size: payload and stored headers
        if self.quotas is None:
            self.limits.check(topic, len(valid), total)
        else:
            await self.quotas.admit(topic, len(valid), total, self.limits)
        gate = self.gates.get((project, name))
        if gate is None:
            written = await self.writer.write_many(topic, records)
        else:
            written = await gate.write_many(self.writer, topic, records)
        for (index, parsed, size), outcome in zip(valid, written, strict=True):
            results[index] = (
                self._accepted(topic, parsed, outcome, size, now_ms, started_ns)
                if isinstance(outcome, Written)
                else _as_error(outcome)
            )
        return cast("list[Accepted | HttpbusError]", results)

    def _accepted(
        self,
        topic: Topic,
        parsed: headers.Parsed,
        written: Written,
        size: int,
        now_ms: int,
        started_ns: int,
    ) -> Accepted:
        if telemetry.enabled:  # a span from the request's start to the storage's ack
            name = f"{topic.project}/{topic.name}"
            telemetry.publish_span(
                parsed.headers, name, parsed.message_id, started_ns, time.time_ns()
            )
        if self.audit is not None:
            self.audit.emit(
                AuditEvent(
                    type=AuditType.ACCEPTED,
                    message_id=parsed.message_id,
                    project=topic.project,
                    topic=topic.name,
                    segment=written.segment_id,
                    partition=written.partition,
                    position=written.position,
                    group=parsed.group_id,
                    at_ms=now_ms,
                    produced_at_ms=now_ms,
                    size=size,
                    due_at_ms=parsed.deliver_at_ms,
                    headers=headers.audit_headers(parsed.headers),
                )
            )
        return Accepted(parsed.message_id, written.segment_id, written.partition, written.position)


def _too_large(topic: Topic, size: int) -> TooLarge:
    return TooLarge(
        f"the message has {size} bytes; topic "
        f"{topic.project}/{topic.name} takes at most {topic.max_message_bytes}"
    )


def _as_error(exc: Exception) -> HttpbusError:
    if isinstance(exc, HttpbusError):
        return exc
    return StorageUnavailable(f"the storage refused the message: {exc}")

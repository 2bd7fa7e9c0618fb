"""Publishing: validate, limit, write durably, audit. HTTP-free, so it is easy to test."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

from core import telemetry
from core.audit import accepted_event
from core.envelope import Headers
from core.errors import HttpbusError, StorageUnavailable, TooLarge
from core.ids import new_message_ids
from core.model import Topic
from metastore.dedupe import Claim, DedupeStore, Original
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
    """Where a message was stored (a tuple: a batch makes one per message); ``duplicate``:
    stored before, by an earlier publish of its id within the topic's dedupe window."""

    message_id: str
    segment: int
    partition: int
    position: int
    duplicate: bool = False


@dataclass(slots=True)
class Draft:
    """One message of a request, before validation (not frozen: a batch makes one per
    message, and a frozen dataclass costs a ``setattr`` call per field)."""

    payload: bytes
    headers: Sequence[tuple[str, str]]
    content_type: str | None
    attributes: Headers = ()  # a CloudEvent's, as stored (producer_api.cloudevents)


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
        dedupe: DedupeStore | None = None,
    ) -> None:
        self.dedupe = dedupe  # ids seen within a topic's dedupe window (None: not enforced)
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
            attributes=draft.attributes,
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
        claim = None
        window = topic.dedupe_window_ms
        if window is not None and parsed.client_id and self.dedupe is not None:
            found = await self.dedupe.claim(dedupe_scope(topic), parsed.message_id, window, now_ms)
            if isinstance(found, Original):
                return _duplicate(found)
            claim = found
        gate = self.gates.get((project, name))  # only topics in a cutover have one
        try:
            if gate is None:
                written = await self.writer.write(topic, record)
            else:
                written = await gate.write(self.writer, topic, record)
        except BaseException:
            if claim is not None and self.dedupe is not None:  # a retry may store it
                await asyncio.shield(self.dedupe.release(claim))
            raise
        if claim is not None and self.dedupe is not None:
            self.dedupe.record_soon(claim, written.segment_id, written.partition, written.position)
        return self._accepted(topic, parsed, written, len(draft.payload), now_ms, started_ns)

    async def publish_many(
        self, project: str, name: str, drafts: Sequence[Draft | HttpbusError]
    ) -> list[Accepted | HttpbusError]:
        """Store many messages; a result per message, in order (an error among ``drafts``,
        a message refused before, such as an invalid CloudEvent, is its result)."""
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
            if isinstance(draft, HttpbusError):
                results.append(draft)
                continue
            size = len(draft.payload)
            parsed = (
                _too_large(topic, size)
                if size > limit
                else parser.parse(
                    draft.headers, draft.content_type, new_ids[index], draft.attributes
                )
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
        window = topic.dedupe_window_ms
        claims: list[Claim | None] = [None] * len(valid)
        repeats: dict[int, int] = {}
        if window is not None and self.dedupe is not None:
            valid, records, claims, repeats = await self._claim_many(
                topic, window, now_ms, valid, records, results
            )
        gate = self.gates.get((project, name))
        try:
            if not records:  # nothing left to store (every message a duplicate, say)
                written: list[Written | Exception] = []
            elif gate is None:
                written = await self.writer.write_many(topic, records)
            else:
                written = await gate.write_many(self.writer, topic, records)
        except BaseException:
            await asyncio.shield(self._settle(claims, None))
            raise
        await self._settle(claims, written)
        for (index, parsed, size), outcome in zip(valid, written, strict=True):
            results[index] = (
                self._accepted(topic, parsed, outcome, size, now_ms, started_ns)
                if isinstance(outcome, Written)
                else _as_error(outcome)
            )
        for index, first in repeats.items():  # the same id twice in one batch
            earlier = results[first]
            results[index] = (
                earlier._replace(duplicate=True) if isinstance(earlier, Accepted) else earlier
            )
        return cast("list[Accepted | HttpbusError]", results)

    async def _claim_many(
        self,
        topic: Topic,
        window: int,
        now_ms: int,
        valid: list[tuple[int, headers.Parsed, int]],
        records: list[Record],
        results: list[Accepted | HttpbusError | None],
    ) -> tuple[
        list[tuple[int, headers.Parsed, int]],
        list[Record],
        list[Claim | None],
        dict[int, int],
    ]:
        """Claim a batch's client ids at once: duplicates and refusals are filled into
        ``results``; the messages left to write, their records and claims, and the
        indexes of ids repeated within the batch (to the first index of each)."""
        assert self.dedupe is not None
        first_of: dict[str, int] = {}
        repeats: dict[int, int] = {}
        todo: list[tuple[tuple[int, headers.Parsed, int], Record]] = []
        for entry, record in zip(valid, records, strict=True):
            index, parsed, _ = entry
            if parsed.client_id:
                if parsed.message_id in first_of:
                    repeats[index] = first_of[parsed.message_id]
                    continue
                first_of[parsed.message_id] = index
            todo.append((entry, record))
        scope = dedupe_scope(topic)
        found = await asyncio.gather(
            *(
                self.dedupe.claim(scope, p.message_id, window, now_ms)
                if p.client_id
                else _no_claim()
                for (_, p, _), _ in todo
            ),
            return_exceptions=True,
        )
        kept: list[tuple[int, headers.Parsed, int]] = []
        kept_records: list[Record] = []
        claims: list[Claim | None] = []
        for (entry, record), outcome in zip(todo, found, strict=True):
            if isinstance(outcome, Original):
                results[entry[0]] = _duplicate(outcome)
            elif isinstance(outcome, BaseException):
                if not isinstance(outcome, Exception):
                    raise outcome
                results[entry[0]] = _as_error(outcome)
            else:
                kept.append(entry)
                kept_records.append(record)
                claims.append(outcome)
        return kept, kept_records, claims, repeats

    async def _settle(
        self, claims: Sequence[Claim | None], written: Sequence[Written | Exception] | None
    ) -> None:
        """Record each claim whose message was written, release the others."""
        if self.dedupe is None or not any(claims):
            return
        dedupe = self.dedupe
        outcomes: Sequence[Written | Exception | None] = (
            [None] * len(claims) if written is None else written
        )
        releases = []
        for claim, w in zip(claims, outcomes, strict=True):
            if claim is None:
                continue
            if isinstance(w, Written):
                dedupe.record_soon(claim, w.segment_id, w.partition, w.position)
            else:
                releases.append(dedupe.release(claim))
        await asyncio.gather(*releases, return_exceptions=True)

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
                accepted_event(
                    message_id=parsed.message_id,
                    project=topic.project,
                    topic=topic.name,
                    segment=written.segment_id,
                    partition=written.partition,
                    position=written.position,
                    group=parsed.group_id,
                    at_ms=now_ms,
                    size=size,
                    due_at_ms=parsed.deliver_at_ms,
                    headers=headers.audit_headers(parsed.headers),
                )
            )
        return Accepted(parsed.message_id, written.segment_id, written.partition, written.position)


def dedupe_scope(topic: Topic) -> str:
    """The ids' scope in the dedupe store: the topic and its creation time, so a topic
    deleted and made again starts with no ids (the old ones expire with their partitions)."""
    return f"{topic.project}/{topic.name}@{int(topic.created_at.timestamp() * 1000)}"


def _duplicate(original: Original) -> Accepted:
    return Accepted(
        original.message_id, original.segment, original.partition, original.position, True
    )


async def _no_claim() -> None:
    return None


def _too_large(topic: Topic, size: int) -> TooLarge:
    return TooLarge(
        f"the message has {size} bytes; topic "
        f"{topic.project}/{topic.name} takes at most {topic.max_message_bytes}"
    )


def _as_error(exc: Exception) -> HttpbusError:
    if isinstance(exc, HttpbusError):
        return exc
    return StorageUnavailable(f"the storage refused the message: {exc}")

"""Pushing one message to a subscription's endpoint: the ``EndpointSender`` seam and the
request every attempt sends. The production implementation is
:class:`~delivery_workers.http_sender.HttpSender`; tests use a recording double
(``tests/support/senders.py``); ``bench/senders.py`` keeps aiohttp and httpx senders as
comparisons.

The request (:func:`build_request`, pure) is the payload byte for byte with its content type,
the carried ``X-`` headers, the endpoint's static headers, httpbus's own headers
(``X-Message-Id``, ``X-Group-Id``, ``X-Topic``, ``X-Produced-At``, ``X-Attempt``) and the
Standard Webhooks signature (:mod:`core.signing`): one ``v1,…`` per secret in force, space
separated, so during a secret rotation's overlap a receiver holding either secret verifies
(:meth:`core.model.Subscription.secrets_at`). Later sources win on a name clash:
carried < static < httpbus's own, so neither a producer nor an operator can forge the id, the
attempt or the signature a receiver relies on.

A subscription with ``batch`` set sends a :class:`BatchDelivery` instead: one request whose
body is a JSON array of its messages (:func:`build_batch_request`, docs/receiving.md).

A subscription's ``delivery_format`` may ask for CloudEvents (:mod:`core.cloudevents`):
``cloudevents-binary`` adds the event's ``ce-`` headers to the request above,
``cloudevents-structured`` sends the event as ``application/cloudevents+json`` (a batch as
``application/cloudevents-batch+json``). The signature covers the body as sent, as always.
A message published as a CloudEvent carries its ``ce-`` attributes in ``raw`` too, with
``ce-id``: it reaches the endpoint as the binary-mode event it was.

``send`` never raises for anything the endpoint does: every attempt ends as a
:class:`~core.result.DeliveryResult`.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import NamedTuple, Protocol, runtime_checkable

from core import cloudevents
from core.envelope import (
    ATTEMPT,
    BATCH_SIZE,
    CE_PREFIX,
    CE_SPECVERSION,
    CONTENT_TYPE,
    GROUP_ID,
    INTERNAL_PREFIX,
    MESSAGE_ID,
    PRODUCED_AT,
    REPLAY,
    RESERVED,
    TOPIC,
    TRACE_CONTEXT,
    Envelope,
)
from core.envelope import header as stored_header
from core.lifecycle import Lifecycle
from core.model import DeliveryFormat, Subscription
from core.result import DeliveryResult
from core.signing import sign_with_key, signing_key
from segments.protocol import Stored

DEFAULT_CONTENT_TYPE = "application/octet-stream"
MAX_RESPONSE_BYTES = 64 * 1024
USER_AGENT = "httpbus"
# Framing is the HTTP client's business; a static header must not contradict it.
_FRAMING = {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "te"}


@dataclass(frozen=True, slots=True)
class Delivery:
    """One attempt to push ``message`` of ``topic`` (``"project/topic"``) to ``subscription``;
    ``attempt`` counts from 1."""

    subscription: Subscription
    topic: str
    message: Stored
    attempt: int = 1

    def header(self, name: str) -> str | None:
        """A stored header (lower-case name), decoded as it was received."""
        return stored_header(self.message.headers, name)

    @property
    def message_id(self) -> str:
        """The message's id; a message stored without one (never by the producer service)
        gets its storage address, which is at least the same on every attempt."""
        found = self.header(MESSAGE_ID)
        return found or f"{self.topic}/{self.message.partition}/{self.message.position}"


class OutgoingRequest(NamedTuple):
    """What :func:`build_request` makes: ``method, url, headers, body = build_request(...)``."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes


@lru_cache(maxsize=256)  # messages come in bursts of the same second
def _rfc3339_s(epoch_s: int) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.")


def _rfc3339_ms(epoch_ms: int) -> str:
    return f"{_rfc3339_s(epoch_ms // 1000)}{epoch_ms % 1000:03d}Z"


@lru_cache(maxsize=4096)  # one base64 decode per subscription, not per delivery
def _key(secret: str) -> bytes:
    return signing_key(secret)


_OWN = {MESSAGE_ID, GROUP_ID, PRODUCED_AT, CONTENT_TYPE, REPLAY}
# Carried headers: stored "x-" headers that are neither httpbus's own nor the retry path's.
# Decided once per header name (names repeat from message to message).
_CARRIED: dict[str, bool] = {}


def _carried(name: str) -> bool:
    found = _CARRIED.get(name)
    if found is None:
        found = (
            (
                name.startswith("x-")
                and name not in RESERVED
                and not name.startswith(INTERNAL_PREFIX)
            )
            or name in TRACE_CONTEXT
            or name.startswith(CE_PREFIX)  # a CloudEvent's attributes (core.cloudevents)
        )
        if len(_CARRIED) < 10_000:  # bounded: producers choose the names
            _CARRIED[name] = found
    return found


def build_request(delivery: Delivery, now_s: int) -> OutgoingRequest:
    """The request of one attempt, signed at ``now_s`` (epoch seconds). Header values are
    latin-1 text, as HTTP carries them. ``ValueError`` if a signing secret in force is not a
    Standard Webhooks secret."""
    sub, msg = delivery.subscription, delivery.message
    endpoint = sub.endpoint
    # Lower-case name -> (name as sent, value); a later source replaces an earlier one. This
    # is the hot path of every delivery: plain dict stores, no helper calls.
    # Lowest precedence: a static header may replace these. No compression, so a response
    # body is only ever read as far as its first bytes (see ``_read_capped``).
    headers: dict[str, tuple[str, str]] = {
        "user-agent": ("User-Agent", USER_AGENT),
        "accept-encoding": ("Accept-Encoding", "identity"),
    }
    own: dict[str, str] = {}  # one pass; values decoded as core.envelope.decode (inlined)
    for name, raw in msg.headers:
        if name in _OWN:
            if name not in own:
                own[name] = raw.decode("latin-1")
        elif _carried(name):
            headers[name] = (name, raw.decode("latin-1"))
    if endpoint.headers:
        for name, value in endpoint.headers.items():
            lower = name.lower()
            if lower not in _FRAMING:
                headers[lower] = (name, value)
    message_id = own.get(MESSAGE_ID) or delivery.message_id
    produced = own.get(PRODUCED_AT)
    produced_ms = int(produced) if produced and produced.isdigit() else msg.timestamp_ms
    headers[CONTENT_TYPE] = ("Content-Type", own.get(CONTENT_TYPE) or DEFAULT_CONTENT_TYPE)
    headers[MESSAGE_ID] = ("X-Message-Id", message_id)
    group = own.get(GROUP_ID)
    if group is not None:
        headers[GROUP_ID] = ("X-Group-Id", group)
    headers[TOPIC] = ("X-Topic", delivery.topic)
    headers[PRODUCED_AT] = ("X-Produced-At", _rfc3339_ms(produced_ms))
    headers[ATTEMPT] = ("X-Attempt", str(delivery.attempt))
    if REPLAY in own:  # a window replayed to this subscription (docs/archive.md)
        headers[REPLAY] = ("X-Replay", "true")
    body = msg.value
    if sub.delivery_format is not DeliveryFormat.RAW or CE_SPECVERSION in headers:
        body = _as_event(delivery, headers, message_id, produced_ms, group, own.get(CONTENT_TYPE))
    headers["webhook-id"] = ("webhook-id", message_id)
    headers["webhook-timestamp"] = ("webhook-timestamp", str(now_s))
    secrets = sub.secrets_at(now_s)  # during a rotation's overlap: the new one and the old
    signature = " ".join(sign_with_key(_key(s), message_id, now_s, body) for s in secrets)
    headers["webhook-signature"] = ("webhook-signature", signature)
    return OutgoingRequest(endpoint.method, _url(endpoint.url), tuple(headers.values()), body)


def _as_event(
    delivery: Delivery,
    headers: dict[str, tuple[str, str]],
    message_id: str,
    produced_ms: int,
    group: str | None,
    content_type: str | None,
) -> bytes:
    """The body of a delivery as a CloudEvent, its headers updated in place: ``raw`` carries
    a message published as an event as the binary-mode event it was (``ce-id`` added);
    ``cloudevents-binary`` adds the attributes a message lacks (:func:`core.cloudevents.context`);
    ``cloudevents-structured`` moves them into an ``application/cloudevents+json`` body."""
    msg, fmt = delivery.message, delivery.subscription.delivery_format
    if fmt is DeliveryFormat.RAW:
        headers["ce-id"] = ("ce-id", cloudevents.quote(message_id))
        return msg.value
    attributes = cloudevents.context(msg.headers, message_id, delivery.topic, produced_ms, group)
    if fmt is DeliveryFormat.CLOUDEVENTS_BINARY:
        for name, value in cloudevents.binary_headers(attributes):
            headers[name] = (name, value)
        return msg.value
    for name in [n for n in headers if n.startswith(CE_PREFIX)]:  # all in the body instead
        del headers[name]
    headers[CONTENT_TYPE] = ("Content-Type", cloudevents.STRUCTURED)
    return cloudevents.structured(attributes, content_type, msg.value)


@lru_cache(maxsize=4096)
def _url(url: object) -> str:
    return str(url)


class Unsent(Exception):
    """Raised by a sender instead of writing a request while :data:`SEND_GATE` is closed:
    nothing left the process, so the attempt may be made again once it opens."""


SEND_GATE: ContextVar[Callable[[], bool] | None] = ContextVar("send_gate", default=None)
"""Whether the attempt under way may still write its request, asked by the sender at the
last moment before it writes, after every await of the attempt (a pool's connection, a
connect, a token): :class:`~.fenced.FencedSender` sets its session lease's ``valid`` here, so
a worker paused in the middle of an attempt writes nothing when it resumes."""


@runtime_checkable
class EndpointSender(Lifecycle, Protocol):
    """Pushes deliveries to endpoints. One per worker process, shared by every
    subscription of it; ``send`` is safe to call concurrently and never raises for an
    endpoint's failure."""

    async def send(self, delivery: Delivery | BatchDelivery) -> DeliveryResult:
        """Make one attempt (of one message, or of a batch) and say how it went."""


@dataclass(frozen=True, slots=True)
class BatchDelivery:
    """One attempt to push ``messages`` of ``topic`` to ``subscription`` in one request (a
    subscription with ``batch`` set); ``attempts`` is each message's attempt, in order."""

    subscription: Subscription
    topic: str
    messages: tuple[Stored, ...]
    attempts: tuple[int, ...]

    @property
    def attempt(self) -> int:
        """The batch's ``X-Attempt``: the highest attempt of its messages (each entry carries
        its own), so a message sent again carries its own count however it comes back: in
        place beside the other failed ones, or through a delay level in a new batch."""
        return max(self.attempts, default=1)

    @property
    def message_id(self) -> str:
        """The batch's id (``webhook-id``): a digest of its message ids, so a batch sent again
        as it was carries the same id, and another batch another one."""
        ids = "\n".join(batch_message_id(self.topic, m) for m in self.messages)
        return "batch_" + hashlib.sha256(ids.encode()).hexdigest()[:32]


BATCH_CONTENT_TYPE = "application/json"
_TEXTUAL = ("text/", "application/json", "application/xml", "application/x-www-form-urlencoded")


def batch_message_id(topic: str, msg: Stored) -> str:
    """A message's ``id`` in a batch (and in a batch answer's ``failed``): its
    ``X-Message-Id``, else ``topic/partition/position``."""
    return stored_header(msg.headers, MESSAGE_ID) or f"{topic}/{msg.partition}/{msg.position}"


def batch_entry(topic: str, msg: Stored, attempt: int) -> dict[str, object]:
    """One message of a batch's JSON array (docs/receiving.md, "Batches")."""
    own: dict[str, str] = {}
    carried: dict[str, str] = {}
    for name, raw in msg.headers:
        if name in _OWN:
            own.setdefault(name, raw.decode("latin-1"))
        elif _carried(name):
            carried[name] = raw.decode("latin-1")
    if REPLAY in own:
        carried[REPLAY] = "true"
    produced = own.get(PRODUCED_AT)
    produced_ms = int(produced) if produced and produced.isdigit() else msg.timestamp_ms
    content_type = own.get(CONTENT_TYPE) or DEFAULT_CONTENT_TYPE
    base = content_type.split(";", 1)[0].strip().lower()
    payload: str | None = None
    if base.startswith(_TEXTUAL) or base.endswith(("+json", "+xml")):
        try:
            payload = msg.value.decode("utf-8")
        except UnicodeDecodeError:
            payload = None
    return {
        "id": own.get(MESSAGE_ID) or batch_message_id(topic, msg),
        "group": own.get(GROUP_ID),
        "headers": carried,
        "produced_at": _rfc3339_ms(produced_ms),
        "attempt": attempt,
        "content_type": content_type,
        "encoding": "text" if payload is not None else "base64",
        "payload": payload if payload is not None else base64.b64encode(msg.value).decode(),
    }


def batch_event(topic: str, msg: Stored) -> bytes:
    """One message of a ``cloudevents-structured`` batch: its structured-mode event."""
    envelope = Envelope.of(msg.headers)
    produced_ms = envelope.produced_at_ms or msg.timestamp_ms
    message_id = envelope.message_id or batch_message_id(topic, msg)
    attributes = cloudevents.context(msg.headers, message_id, topic, produced_ms, envelope.group)
    return cloudevents.structured(attributes, envelope.content_type, msg.value)


def build_batch_request(batch: BatchDelivery, now_s: int) -> OutgoingRequest:
    """The request of one batch attempt, signed at ``now_s``: a JSON array of
    :func:`batch_entry`, with the endpoint's static headers, ``X-Topic``, ``X-Batch-Size``,
    ``X-Attempt`` and the Standard Webhooks headers of the batch id. ``ValueError`` as
    :func:`build_request`."""
    sub, endpoint = batch.subscription, batch.subscription.endpoint
    if sub.delivery_format is DeliveryFormat.CLOUDEVENTS_STRUCTURED:
        body = b"[%s]" % b",".join(batch_event(batch.topic, m) for m in batch.messages)
        content_type = cloudevents.BATCH
    else:
        pairs = zip(batch.messages, batch.attempts, strict=True)
        entries = [batch_entry(batch.topic, m, a) for m, a in pairs]
        body = json.dumps(entries, separators=(",", ":"), ensure_ascii=False).encode()
        content_type = BATCH_CONTENT_TYPE
    headers: dict[str, tuple[str, str]] = {
        "user-agent": ("User-Agent", USER_AGENT),
        "accept-encoding": ("Accept-Encoding", "identity"),
    }
    for name, value in (endpoint.headers or {}).items():
        lower = name.lower()
        if lower not in _FRAMING:
            headers[lower] = (name, value)
    batch_id = batch.message_id
    headers[CONTENT_TYPE] = ("Content-Type", content_type)
    headers[TOPIC] = ("X-Topic", batch.topic)
    headers[BATCH_SIZE] = ("X-Batch-Size", str(len(batch.messages)))
    headers[ATTEMPT] = ("X-Attempt", str(batch.attempt))
    headers["webhook-id"] = ("webhook-id", batch_id)
    headers["webhook-timestamp"] = ("webhook-timestamp", str(now_s))
    secrets = sub.secrets_at(now_s)
    signature = " ".join(sign_with_key(_key(s), batch_id, now_s, body) for s in secrets)
    headers["webhook-signature"] = ("webhook-signature", signature)
    return OutgoingRequest(endpoint.method, _url(endpoint.url), tuple(headers.values()), body)

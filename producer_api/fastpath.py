"""Produce in raw ASGI: the hot paths skip FastAPI's per-request work.

Publishing is what every client does most; FastAPI's routing, dependency resolution and
telemetry hooks cost about as much as the rest of a single-message request (measured in
``bench/produce.py``). :class:`ProducerASGI` answers ``POST .../produce`` and
``POST .../produce/batch`` itself and hands every other request to the FastAPI app, which
also documents both routes in OpenAPI and serves them through the same :func:`produce_one`
and :func:`produce_many` when mounted without this wrapper.

A batch body is decoded without a pydantic model per message (:func:`batch_drafts`); any
body off the common shape is left to the :class:`Batch` model, so refusals are pydantic's.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any

import orjson
from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import from_json

from core import http_errors
from core.errors import (
    HeadersTooLarge,
    HttpbusError,
    Malformed,
    NotFound,
    RequestTimeout,
    TooLarge,
)
from core.http_direct import DirectHandler, body_is_here
from core.names import check_name

from . import cloudevents
from .publish import Accepted, Draft
from .service import RequestRules, Service

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[
    [Service, str, str, Iterable[tuple[bytes, bytes]], Receive],
    Awaitable[tuple[int, dict[str, str], bytes]],
]

PRODUCE = re.compile(r"/v1/projects/([^/]+)/topics/([^/]+)/produce(/batch)?")
_PRODUCE_RAW = re.compile(rb"/v1/projects/([^/]+)/topics/([^/]+)/produce(/batch)?")
_JSON = (b"content-type", b"application/json")
MAX_BATCH = 1_000
MAX_BATCH_BYTES = 16 * 1024 * 1024


class BatchMessage(BaseModel):
    """One message of a batch request: exactly one of ``payload`` and ``payload_base64``."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        json_schema_extra={  # what _one_payload checks, for clients and fuzzers to see
            "oneOf": [
                {"required": ["payload"], "properties": {"payload": {"type": "string"}}},
                {
                    "required": ["payload_base64"],
                    "properties": {"payload_base64": {"type": "string"}},
                },
            ]
        },
    )

    payload: str | None = Field(default=None, description="UTF-8 text payload")
    payload_base64: str | None = Field(default=None, description="binary payload, base64")
    content_type: str | None = None
    headers: dict[str, str] = Field(default_factory=dict, description="X- headers")

    @model_validator(mode="after")
    def _one_payload(self) -> BatchMessage:
        if (self.payload is None) == (self.payload_base64 is None):
            raise ValueError("give exactly one of payload and payload_base64")
        return self

    def draft(self) -> Draft:
        if self.payload is not None:
            data = self.payload.encode()
        else:
            try:
                data = base64.b64decode(self.payload_base64 or "", validate=True)
            except ValueError:  # binascii.Error, or characters outside ASCII
                raise Malformed("payload_base64 is not valid base64") from None
        return Draft(
            data, tuple((k.lower(), v) for k, v in self.headers.items()), self.content_type
        )


class Batch(BaseModel):
    """A batch request's body (its schema is the route's in OpenAPI)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: list[BatchMessage] = Field(min_length=1, max_length=MAX_BATCH)


_FIELDS = frozenset(BatchMessage.model_fields)


async def read_body(receive: Receive, declared: str | None, limit: int, timeout_s: float) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit``, and
    with 408 if it has not all come within ``timeout_s`` (a slow client holds no buffer for
    ever)."""
    if declared is not None and declared.isdigit() and len(declared) < 20 and int(declared) > limit:
        raise TooLarge(f"the body has {declared} bytes; at most {limit} are taken here")
    if body_is_here(receive):  # it came with the headers: no wait to bound (a timer's cost)
        chunk, _ = _body_part(await receive(), 0, limit)
        return chunk
    chunks: list[bytes] = []
    size, more = 0, True
    try:
        async with asyncio.timeout(timeout_s):
            while more:
                chunk, more = _body_part(await receive(), size, limit)
                size += len(chunk)
                chunks.append(chunk)
    except TimeoutError:
        raise RequestTimeout(
            f"the body did not come within {timeout_s:g} s; send it at once"
        ) from None
    return b"".join(chunks)


def _body_part(message: Message, size: int, limit: int) -> tuple[bytes, bool]:
    """The part of the body in ``message`` and whether more follows; ``size``: the bytes
    before it."""
    if message["type"] == "http.disconnect":
        # Gone before its whole body came (a client killed mid-request): storing what came
        # would keep a truncated message under the client's id, and a dedupe topic would
        # answer its retry, with the whole body, as a duplicate.
        raise Malformed(
            f"the client closed the connection after {size} bytes of the body: "
            "nothing stored; send the request again"
        )
    chunk: bytes = message.get("body", b"")
    if size + len(chunk) > limit:
        raise TooLarge(f"the body has more than {limit} bytes, the most taken here")
    return chunk, message.get("more_body", False)


def request_headers(
    raw_headers: Iterable[tuple[bytes, bytes]], rules: RequestRules
) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The request's headers as (lower-case name, value) pairs, and by name (the first of a
    repeated name); 431 past ``rules.max_header_bytes``, 400 for two ``Authorization``."""
    headers: list[tuple[str, str]] = []
    named: dict[str, str] = {}
    size = 0
    for k, v in raw_headers:
        size += len(k) + len(v)
        name = k.decode("latin-1").lower()
        value = v.decode("latin-1")
        if name in named:
            if name == "authorization":
                raise Malformed("send one Authorization header, not several")
        else:
            named[name] = value
        headers.append((name, value))
    if size > rules.max_header_bytes:
        raise HeadersTooLarge(
            f"the request's headers have {size} bytes (names and values); "
            f"at most {rules.max_header_bytes} are taken"
        )
    return headers, named


def _names(project: str, topic: str) -> None:
    try:
        check_name(project)
        check_name(topic)
    except ValueError:
        raise NotFound(f"topic {project}/{topic} does not exist") from None


async def produce_one(
    service: Service,
    project: str,
    topic: str,
    raw_headers: Iterable[tuple[bytes, bytes]],
    receive: Receive,
) -> tuple[int, dict[str, str], bytes]:
    """Publish one request's body; status, headers and body of the answer."""
    t0 = time.perf_counter()
    size = 0
    seen = False  # the topic exists and the caller may publish to it: a metric may name it
    try:
        headers, named = request_headers(raw_headers, service.rules)
        if not service.cache.cached(project, topic):  # a cached topic has valid names
            _names(project, topic)
        await service.authorizer.check(named.get("authorization", ""), project, topic)
        found = await service.cache.topic(project, topic)
        seen = True
        content_type = named.get("content-type")
        event = cloudevents.mode(content_type, named)
        payload = await read_body(
            receive,
            named.get("content-length"),
            (
                _event_limit(found.max_message_bytes)
                if event is cloudevents.Mode.STRUCTURED
                else found.max_message_bytes
            ),
            service.rules.body_timeout_s,
        )
        size = len(payload)
        if event is None:
            draft = Draft(payload, headers, content_type)
        else:
            draft = cloudevents.single_draft(event, found, payload, headers, content_type)
        accepted = await service.publisher.publish(project, topic, draft)
    except HttpbusError as exc:
        service.metrics.refused(project, topic, exc.code.code, seen=seen)
        return http_errors.render(exc)
    service.metrics.accepted(project, topic, size, time.perf_counter() - t0)
    if accepted.duplicate:
        service.metrics.duplicate(project, topic)
    answer: dict[str, Any] = {
        "message_id": accepted.message_id,
        "segment": accepted.segment,
        "partition": accepted.partition,
        "position": accepted.position,
    }
    if accepted.duplicate:  # stored by an earlier publish of this id: nothing stored now
        answer["duplicate"] = True
    status = 200 if accepted.duplicate else 201
    return status, {"X-Message-Id": accepted.message_id}, orjson.dumps(answer)


def _event_limit(max_message_bytes: int) -> int:
    """The body a single CloudEvent may have: a structured event's JSON holds its attributes
    and its data in base64 (4/3 of the bytes), so its body may be larger than the message it
    stores; the message itself is held to ``max_message_bytes`` after it is decoded."""
    return max_message_bytes * 4 // 3 + EVENT_OVERHEAD


EVENT_OVERHEAD = 64 * 1024


def batch_drafts(body: bytes) -> list[Draft]:
    """The drafts of a batch body, in order; what the :class:`Batch` model refuses is
    refused with its errors (422 naming each field, 400 for JSON that does not parse)."""
    drafts = _common_drafts(body)
    if drafts is not None:
        return drafts
    try:
        batch = Batch.model_validate_json(body)
    except ValidationError as exc:
        raise http_errors.from_validation(exc.errors()) from None
    return [m.draft() for m in batch.messages]


def _common_drafts(body: bytes) -> list[Draft] | None:
    """The drafts of a batch of the common shape, decoded without a model per message; None
    for any body the model might see otherwise (it then decides, and words the errors)."""
    try:
        # pydantic's own JSON parser: what it refuses here, the model refuses too.
        doc = from_json(body)
    except ValueError:
        return None
    messages = doc.get("messages") if type(doc) is dict and len(doc) == 1 else None
    if type(messages) is not list or not 1 <= len(messages) <= MAX_BATCH:
        return None
    drafts = []
    for message in messages:
        draft = _common_draft(message)
        if draft is None:
            return None
        drafts.append(draft)
    return drafts


def _common_draft(message: object) -> Draft | None:
    """``BatchMessage.model_validate(message).draft()`` when both would succeed, else None."""
    if type(message) is not dict or not message.keys() <= _FIELDS:
        return None
    payload, encoded = message.get("payload"), message.get("payload_base64")
    content_type = message.get("content_type")
    if content_type is not None and type(content_type) is not str:
        return None
    pairs: tuple[tuple[str, str], ...] = ()  # a tuple: the header parser's cache key as is
    if "headers" in message:
        headers = message["headers"]
        if type(headers) is not dict:
            return None
        listed = []
        for name, value in headers.items():
            if type(value) is not str:
                return None
            listed.append((name.lower(), value))
        pairs = tuple(listed)
    if type(payload) is str and encoded is None:
        data = payload.encode()
    elif type(encoded) is str and payload is None:
        try:
            data = base64.b64decode(encoded, validate=True)
        except ValueError:  # binascii.Error, or not ASCII: the model path says which
            return None
    else:
        return None
    return Draft(data, pairs, content_type)


def _batch_body(results: Sequence[Accepted | HttpbusError]) -> tuple[int, int, bytes]:
    """Status, number accepted and JSON body of a batch's answer."""
    out: list[dict[str, Any]] = []
    failed = duplicates = 0
    for index, result in enumerate(results):
        if isinstance(result, Accepted):
            one = {
                "index": index,
                "status": 201,
                "message_id": result.message_id,
                "segment": result.segment,
                "partition": result.partition,
                "position": result.position,
            }
            if result.duplicate:
                duplicates += 1
                one["status"] = 200
                one["duplicate"] = True
            out.append(one)
        else:
            failed += 1
            out.append({"index": index, "status": result.code.status, **result.to_body()})
    accepted = len(results) - failed
    body: dict[str, Any] = {"accepted": accepted, "failed": failed, "results": out}
    if duplicates:
        body["duplicates"] = duplicates
    return (207 if failed else 200), accepted, orjson.dumps(body)


async def produce_many(
    service: Service,
    project: str,
    topic: str,
    raw_headers: Iterable[tuple[bytes, bytes]],
    receive: Receive,
) -> tuple[int, dict[str, str], bytes]:
    """Publish a batch request's messages; status, headers and body of the answer (200 all
    stored, 207 some failed, a result per message; an error if the request is refused)."""
    seen = False  # as in produce_one
    try:
        _, named = request_headers(raw_headers, service.rules)
        _names(project, topic)
        await service.authorizer.check(named.get("authorization", ""), project, topic)
        found = await service.cache.topic(project, topic)
        seen = True
        event = cloudevents.mode(named.get("content-type"), named)
        if event is cloudevents.Mode.BINARY or event is cloudevents.Mode.STRUCTURED:
            raise cloudevents.not_a_batch(event)
        body = await read_body(
            receive, named.get("content-length"), MAX_BATCH_BYTES, service.rules.body_timeout_s
        )
        drafts = batch_drafts(body) if event is None else cloudevents.batch_drafts(found, body)
        results = await service.publisher.publish_many(project, topic, drafts)
    except HttpbusError as exc:
        service.metrics.refused(project, topic, exc.code.code, seen=seen)
        return http_errors.render(exc)
    status, accepted, answer = _batch_body(results)
    service.metrics.accepted(project, topic, 0, 0.0, messages=accepted)
    duplicates = sum(1 for r in results if isinstance(r, Accepted) and r.duplicate)
    if duplicates:
        service.metrics.duplicate(project, topic, duplicates)
    return status, {}, answer


class ProducerASGI:
    """The producer's ASGI app: the fast produce path in front of the FastAPI app. Any
    attribute (``state``, ``router``, ``openapi``) is the FastAPI app's."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            match = PRODUCE.fullmatch(scope["path"])
            if match is not None:
                handler = produce_many if match[3] else produce_one
                status, headers, body = await self._answer(
                    handler, match[1], match[2], scope["headers"], receive
                )
                headers.append((b"content-length", str(len(body)).encode()))
                await send({"type": "http.response.start", "status": status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

    def http_direct_route(self, method: bytes, path: bytes) -> DirectHandler | None:
        """The produce routes, answered by the HTTP server without ASGI (core.http_direct)."""
        if method != b"POST" or not path.isascii():
            return None
        match = _PRODUCE_RAW.fullmatch(path)
        if match is None:
            return None
        handler = produce_many if match[3] else produce_one
        project, topic = match[1].decode(), match[2].decode()
        return functools.partial(self._answer, handler, project, topic)

    async def _answer(
        self,
        handler: Handler,
        project: str,
        topic: str,
        raw_headers: Iterable[tuple[bytes, bytes]],
        receive: Receive,
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        service: Service = self.app.state.service
        status, headers, body = await handler(service, project, topic, raw_headers, receive)
        raw = [_JSON]
        raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        return status, raw, body

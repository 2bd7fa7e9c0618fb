"""The single-message produce in raw ASGI: the hot path skips FastAPI's per-request work.

Publishing one message is what every client does most; FastAPI's routing, dependency
resolution and telemetry hooks cost about as much as the rest of the request (measured in
``bench/produce.py``). :class:`ProducerASGI` answers ``POST .../produce`` itself and hands
every other request to the FastAPI app, which also documents the produce route in OpenAPI
and serves it through the same :func:`produce_one` when mounted without this wrapper.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from fastapi import FastAPI

from httpbus.core import http_errors
from httpbus.core.errors import HttpbusError, NotFound, TooLarge
from httpbus.core.names import check_name

from .publish import Draft
from .service import Service

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

PRODUCE = re.compile(r"/v1/projects/([^/]+)/topics/([^/]+)/produce")
_JSON = (b"content-type", b"application/json")


async def read_body(receive: Receive, declared: str | None, limit: int) -> bytes:
    """The request body, refused with 413 as soon as it is known to exceed ``limit``."""
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"the body has {declared} bytes; at most {limit} are taken here")
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise TooLarge(f"the body has more than {limit} bytes, the most taken here")
        chunks.append(chunk)
        more = message.get("more_body", False)
    return b"".join(chunks)


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
    headers = [(k.decode("latin-1").lower(), v.decode("latin-1")) for k, v in raw_headers]
    named = dict(headers)
    size = 0
    try:
        _names(project, topic)
        await service.authorizer.check(named.get("authorization", ""), project, topic)
        found = await service.cache.topic(project, topic)
        payload = await read_body(receive, named.get("content-length"), found.max_message_bytes)
        size = len(payload)
        draft = Draft(payload, headers, named.get("content-type"))
        accepted = await service.publisher.publish(project, topic, draft)
    except HttpbusError as exc:
        service.metrics.refused(project, topic, exc.code.code)
        return http_errors.render(exc)
    service.metrics.accepted(project, topic, size, time.perf_counter() - t0)
    body = json.dumps(
        {
            "message_id": accepted.message_id,
            "segment": accepted.segment,
            "partition": accepted.partition,
            "position": accepted.position,
        }
    )
    return 201, {"X-Message-Id": accepted.message_id}, body.encode()


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
                service: Service = self.app.state.service
                status, headers, body = await produce_one(
                    service, match[1], match[2], scope["headers"], receive
                )
                raw = [_JSON, (b"content-length", str(len(body)).encode())]
                raw += [(k.lower().encode(), v.encode()) for k, v in headers.items()]
                await send({"type": "http.response.start", "status": status, "headers": raw})
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)

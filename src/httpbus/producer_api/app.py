"""The producer service's ASGI application: produce, batch produce, health and metrics."""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from httpbus import __version__
from httpbus.core import http_errors
from httpbus.core.errors import HttpbusError, Malformed, MetaStoreUnavailable
from httpbus.metastore.catalog import Catalog
from httpbus.metastore.config import open_metastore
from httpbus.metastore.protocol import MetaStore
from httpbus.segments.audit import AuditSink
from httpbus.segments.protocol import SegmentStore
from httpbus.segments.registry import open_stores
from httpbus.segments.writer import SegmentWriter

from .auth import Authorizer
from .fastpath import ProducerASGI, produce_one, read_body
from .metadata import TopicCache
from .metrics import ProducerMetrics
from .publish import Accepted, Draft, Publisher
from .service import Service
from .settings import ProducerSettings

MAX_BATCH = 1_000
MAX_BATCH_BYTES = 16 * 1024 * 1024


class BatchMessage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

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
            except binascii.Error:
                raise Malformed("payload_base64 is not valid base64") from None
        return Draft(data, [(k.lower(), v) for k, v in self.headers.items()], self.content_type)


class Batch(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: list[BatchMessage] = Field(min_length=1, max_length=MAX_BATCH)


def _accepted_body(accepted: Accepted) -> dict[str, Any]:
    return {
        "message_id": accepted.message_id,
        "segment": accepted.segment,
        "partition": accepted.partition,
        "position": accepted.position,
    }


def create_app(
    settings: ProducerSettings,
    *,
    metastore: MetaStore | None = None,
    stores: dict[str, SegmentStore] | None = None,
) -> ProducerASGI:
    """Build the producer service; ``metastore`` and ``stores`` are opened from
    ``settings`` unless given (already started) by the caller."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            meta = metastore
            if meta is None:
                meta = await stack.enter_async_context(open_metastore(settings.metastore))
            opened = await open_stores(stack, settings.clusters, stores)
            audit = None
            if settings.audit.cluster is not None:
                audit = AuditSink(
                    opened[settings.audit.cluster],
                    settings.audit.topic,
                    partitions=settings.audit.partitions,
                )
                await stack.enter_async_context(audit)
            cache = TopicCache(Catalog(meta), settings.unknown_topic_cache_s)
            stack.push_async_callback(cache.aclose)
            writer = SegmentWriter(opened, cache.refresh)
            token = settings.admin_token.get_secret_value() if settings.admin_token else None
            app.state.service = Service(
                Publisher(cache, writer, audit, max_carried=settings.max_carried_headers),
                Authorizer(cache, token),
                cache,
                ProducerMetrics(),
            )
            await meta.join(
                "producers",
                settings.member_id,
                json.dumps(
                    {
                        "host": settings.host,
                        "port": settings.port,
                        "pid": os.getpid(),
                        "version": __version__,
                        "started_ms": int(time.time() * 1000),
                    }
                ).encode(),
            )
            yield

    app = FastAPI(title="httpbus producer", version=__version__, lifespan=lifespan)
    http_errors.install(app)
    _routes(app)
    return ProducerASGI(app)


def _routes(app: FastAPI) -> None:
    @app.post(
        "/v1/projects/{project}/topics/{topic}/produce",
        status_code=201,
        tags=["produce"],
        openapi_extra={"requestBody": {"content": {"*/*": {}}, "required": True}},
    )
    async def produce(project: str, topic: str, request: Request) -> Response:
        """Publish the body as one message; 201 only once the storage stored it durably.
        (Served by the fast path of ``fastpath.ProducerASGI``; this route documents it.)"""
        status, headers, body = await produce_one(
            request.app.state.service, project, topic, request.scope["headers"], request.receive
        )
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    @app.post(
        "/v1/projects/{project}/topics/{topic}/produce/batch",
        tags=["produce"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": Batch.model_json_schema()}},
            }
        },
    )
    async def produce_batch(project: str, topic: str, request: Request) -> Response:
        """Publish many messages; a result per message (200 all stored, 207 some failed)."""
        service: Service = request.app.state.service
        await service.authorizer.check(request.headers.get("authorization", ""), project, topic)
        declared = request.headers.get("content-length")
        try:
            batch = Batch.model_validate_json(
                await read_body(request.receive, declared, MAX_BATCH_BYTES)
            )
        except ValidationError as exc:
            raise http_errors.from_validation(exc.errors()) from None
        drafts = [m.draft() for m in batch.messages]
        results = await service.publisher.publish_many(project, topic, drafts)
        out, failed = [], 0
        for index, result in enumerate(results):
            if isinstance(result, Accepted):
                out.append({"index": index, "status": 201, **_accepted_body(result)})
            else:
                failed += 1
                out.append({"index": index, "status": result.code.status, **result.to_body()})
        accepted = len(results) - failed
        service.metrics.accepted(project, topic, 0, 0.0, messages=accepted)
        body = {"accepted": accepted, "failed": failed, "results": out}
        return Response(
            json.dumps(body).encode(),
            status_code=207 if failed else 200,
            media_type="application/json",
        )

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": "producer", "version": __version__}

    @app.get("/readyz", tags=["ops"])
    async def readyz(request: Request) -> dict[str, str]:
        service: Service = request.app.state.service
        try:
            await service.cache.catalog.list_projects()
        except HttpbusError as exc:
            raise MetaStoreUnavailable("the metastore does not answer", retry_after=5) from exc
        return {"status": "ready"}

    @app.get("/metrics", tags=["ops"])
    async def metrics(request: Request) -> Response:
        service: Service = request.app.state.service
        return Response(service.metrics.render(), media_type="text/plain; version=0.0.4")

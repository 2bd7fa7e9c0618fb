"""The producer service's ASGI application: produce, batch produce, health and metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Annotated

from fastapi import FastAPI, Path, Request, Response
from fastapi.responses import PlainTextResponse

from core import cloudevents, http_errors, metrics_group, telemetry
from core.errors import HttpbusError, MetaStoreUnavailable
from core.membership import member_data
from core.metrics_group import LOCAL
from core.names import MAX_NAME, NAME_PATTERN
from core.prefork import Slot
from core.version import VERSION
from metastore.catalog import Catalog
from metastore.dedupe import PRODUCERS, default_dedupe, open_dedupe
from metastore.protocol import MetaStore
from metastore.quotas import QuotaStore
from segments.backends import open_backends
from segments.failover.health import WriteHealth
from segments.failover.records import FailoverRecords
from segments.protocol import SegmentStore
from segments.writer import SegmentWriter

from .auth import Authorizer
from .cloudevents import EVENT_SCHEMA, MAX_EVENTS
from .cutover import CutoverParticipant
from .fastpath import Batch, ProducerASGI, produce_many, produce_one
from .headers import HeaderRules
from .health import HealthReporter
from .metadata import TopicCache
from .metrics import ProducerMetrics
from .publish import Publisher
from .quotas import ProjectQuotas, QuotaCollector
from .service import RequestRules, Service
from .settings import ProducerSettings


def create_app(
    settings: ProducerSettings,
    *,
    metastore: MetaStore | None = None,
    stores: dict[str, SegmentStore] | None = None,
    slot: Slot | None = None,
) -> ProducerASGI:
    """Build the producer service; ``metastore`` and ``stores`` are opened from
    ``settings`` unless given (already started) by the caller; ``slot``: which process of a
    group (:mod:`core.prefork`) this is, whose ``/metrics`` answers for all of them."""
    telemetry.setup("producer")  # spans, if OTEL_EXPORTER_OTLP_ENDPOINT says so

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            meta, opened, audit = await open_backends(
                stack, settings, metastore=metastore, stores=stores
            )
            cache = TopicCache(
                Catalog(meta),
                settings.unknown_topic_cache_s,
                refresh_within_s=settings.cutover_hold_timeout_s,
            )
            stack.push_async_callback(cache.aclose)
            health = WriteHealth(stall_s=settings.failover_stall_s)
            writer = SegmentWriter(opened, cache.refresh, health)
            await stack.enter_async_context(
                HealthReporter(
                    FailoverRecords(meta),
                    health,
                    settings.member_id,
                    settings.failover_report_interval_s,
                )
            )
            participant = CutoverParticipant(
                meta,
                settings.member_id,
                opened,
                cache,
                hold_timeout_s=settings.cutover_hold_timeout_s,
            )
            await stack.enter_async_context(participant)
            cache.on_load = participant.follow
            quotas = await stack.enter_async_context(
                ProjectQuotas(QuotaStore(meta), settings.member_id)
            )
            dedupe = await stack.enter_async_context(
                open_dedupe(
                    settings.dedupe or default_dedupe(settings.metastore),
                    meta,
                    settings.member_id,
                    wait_s=settings.cutover_hold_timeout_s,
                )
            )
            metrics = ProducerMetrics()
            metrics.registry.register(QuotaCollector(quotas))
            token = settings.admin_token.get_secret_value() if settings.admin_token else None
            app.state.service = Service(
                Publisher(
                    cache,
                    writer,
                    audit,
                    rules=HeaderRules(settings.max_carried_headers, settings.max_header_bytes),
                    gates=participant.gates,
                    quotas=quotas,
                    dedupe=dedupe,
                ),
                Authorizer(cache, token),
                cache,
                metrics,
                RequestRules(settings.max_header_bytes, settings.body_timeout_s),
            )
            await meta.join(
                PRODUCERS, settings.member_id, member_data(settings.host, settings.port)
            )
            yield

    app = FastAPI(title="httpbus producer", version=VERSION, lifespan=lifespan)
    app.state.slot = slot
    http_errors.install(app)
    _routes(app)
    return ProducerASGI(app)


# Documented, not enforced here: the fast path answers a name that is no name 404, as an
# unknown topic, whichever way the request is served.
NameParam = Annotated[
    str, Path(json_schema_extra={"pattern": NAME_PATTERN, "minLength": 1, "maxLength": MAX_NAME})
]


def _routes(app: FastAPI) -> None:
    @app.post(
        "/v1/projects/{project}/topics/{topic}/produce",
        status_code=201,
        tags=["produce"],
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "*/*": {},
                    cloudevents.STRUCTURED: {"schema": EVENT_SCHEMA},
                },
            }
        },
    )
    async def produce(project: NameParam, topic: NameParam, request: Request) -> Response:
        """Publish the body as one message; 201 only once the storage stored it durably;
        200 with ``"duplicate": true`` for an id the topic's dedupe window already saw.
        A CloudEvent in binary (``ce-`` headers) or structured mode
        (``application/cloudevents+json``) is published as its data (docs/producing.md).
        (Served by the fast path of ``fastpath.ProducerASGI``; this route documents it.)"""
        status, headers, body = await produce_one(
            request.app.state.service, project, topic, request.scope["headers"], request.receive
        )
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    @app.post(
        "/v1/projects/{project}/topics/{topic}/produce/batch",
        tags=["produce"],
        responses={
            207: {
                "description": "some messages were stored and some refused: a result each",
                "content": {"application/json": {"schema": {"type": "object"}}},
            }
        },
        openapi_extra={
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {"schema": Batch.model_json_schema()},
                    cloudevents.BATCH: {
                        "schema": {
                            "type": "array",
                            "minItems": 1,
                            "maxItems": MAX_EVENTS,
                            "items": EVENT_SCHEMA,
                        }
                    },
                },
            }
        },
    )
    async def produce_batch(project: NameParam, topic: NameParam, request: Request) -> Response:
        """Publish many messages; a result per message (200 all stored, 207 some failed);
        ``application/cloudevents-batch+json``: a JSON array of CloudEvents, a result each.
        (Served by the fast path of ``fastpath.ProducerASGI``; this route documents it.)"""
        status, headers, body = await produce_many(
            request.app.state.service, project, topic, request.scope["headers"], request.receive
        )
        return Response(body, status_code=status, media_type="application/json", headers=headers)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": "producer", "version": VERSION}

    @app.get("/readyz", tags=["ops"])
    async def readyz(request: Request) -> dict[str, str]:
        service: Service = request.app.state.service
        try:
            await service.cache.catalog.list_projects()
        except HttpbusError as exc:
            raise MetaStoreUnavailable("the metastore does not answer", retry_after=5) from exc
        return {"status": "ready"}

    @app.get(
        "/metrics",
        tags=["ops"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text"}},
    )
    async def metrics(request: Request) -> Response:
        service: Service = request.app.state.service
        body = service.metrics.render()
        slot: Slot | None = request.app.state.slot
        if slot is not None and LOCAL not in request.query_params:
            body = await metrics_group.gather(body, slot)
        return Response(body, media_type="text/plain; version=0.0.4")

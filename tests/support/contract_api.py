"""A tiny in-memory FastAPI app that answers the API contracts the UI and the CLI consume
before their real implementations are merged (subscription status / stop / start / seek,
the DLQ, the cutover), with the exact JSON shapes of the contracts, and the real audit routes
on a report database. Unit tests only: the real APIs get their own tests, and the UI and CLI
are tested on them in tests/integration (test_ui_operations, test_cli_real).

``served(app)`` runs any ASGI app on a free port in a thread, for the CLI (a real HTTP client).
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import uvicorn
from fastapi import Body, FastAPI, Query, Request
from fastapi.responses import JSONResponse

from control_plane.api import audit as audit_api
from control_plane.api.auth import Authenticator
from control_plane.ui import session_identity
from core import http_errors
from reports.principals import PrincipalStore

NOW = "2026-11-22T06:00:00Z"


def _sub(paused: bool = False) -> dict[str, Any]:
    return {
        "project": "shop",
        "name": "s1",
        "topic_project": "shop",
        "topic": "orders",
        "endpoint": {
            "url": "http://127.0.0.1:9/hook",
            "method": "POST",
            "timeout_ms": 1000,
            "headers": {},
        },
        "filter": None,
        "retry": {
            "max_attempts": 3,
            "backoff": "fixed",
            "initial_delay_ms": 10,
            "max_delay_ms": 10,
            "multiplier": 2.0,
            "jitter": 0.0,
            "retry_4xx": False,
        },
        "dlq_enabled": True,
        "max_in_flight": 10,
        "rate_limit_per_second": None,
        "circuit_breaker": {},
        "delay_ms": 0,
        "paused": paused,
        "description": "",
        "signing_secret_set": True,  # a read never shows the secret (SubscriptionView)
        "signing_secret_rotated_at": None,
        "previous_secrets_until": None,
        "created_at": NOW,
        "consume_pointer": None,
        "version": 3,
    }


def dlq_message(i: int) -> dict[str, Any]:
    return {
        "message_id": f"m{i:03d}",
        "group_id": f"g{i % 3}",
        "topic": "shop/orders",
        "segment": 1,
        "partition": 0,
        "position": i,
        "content_type": "application/json",
        "headers": {},
        "payload_base64": "eyJvcmRlciI6IDF9",
        "payload_size": 12,
        "last_status": 500,
        "last_error": "HTTP 500 from the endpoint",
        "attempts": 3,
        "first_failed_at": NOW,
        "last_failed_at": NOW,
    }


class State:
    def __init__(self, dlq_size: int) -> None:
        self.paused = False
        self.polls = 0
        self.dlq = [dlq_message(i) for i in range(dlq_size)]
        self.cutover: dict[str, Any] | None = None
        self.cutover_end = "COMPLETE"
        self.cutover_holds = False  # True: reads do not move the cutover on (it waits)
        self.seeks: list[dict[str, Any]] = []


PHASES = ["PREPARE", "SWITCH", "COMMIT", "COMPLETE"]


def fake_app(
    dlq_size: int = 25,
    cutover_end: str = "COMPLETE",
    reports_url: str | None = None,
    admin_token: str = "",
) -> FastAPI:
    """The contract routes, in memory. ``cutover_end``: COMPLETE or ROLLED_BACK. With
    ``reports_url``, the real audit routes on that report database."""
    app = FastAPI()
    http_errors.install(app)
    _authenticate(app, admin_token)
    state = State(dlq_size)
    state.cutover_end = cutover_end
    app.state.fake = state
    subs = "/v1/projects/{p}/subscriptions/{s}"

    def known(s: str) -> None:
        if s != "s1":
            raise _not_found(f"subscription shop/{s} does not exist")

    @app.get(subs)
    def get_sub(p: str, s: str) -> Any:
        known(s)
        return _sub(state.paused)

    @app.post(subs + "/stop")
    def stop(p: str, s: str) -> Any:
        known(s)
        state.paused = True
        return _sub(True)

    @app.post(subs + "/start")
    def start(p: str, s: str) -> Any:
        known(s)
        state.paused = False
        return _sub(False)

    @app.post(subs + "/seek")
    def seek(p: str, s: str, body: Annotated[dict[str, Any], Body()]) -> Any:
        known(s)
        state.seeks.append(body)
        return {"segment": 2, "positions": {"0": 5, "1": 7}}

    @app.get(subs + "/status")
    def status(p: str, s: str) -> Any:
        known(s)
        state.polls += 1
        delivered = 10 * state.polls  # rises on every poll, as deliveries would
        history = [
            {"t": 1_700_000_000 + 10 * i, "delivered": i % 7, "failed": i % 2, "filtered": 1}
            for i in range(360)
        ]
        return {
            "subscription": "shop/s1",
            "state": "paused" if state.paused else "running",
            "worker": "worker-1",
            "segment": 1,
            "partitions": [
                {"partition": 0, "committed": delivered, "end": delivered + 4, "lag": 4}
            ],
            "lag": 4,
            "in_flight": 2,
            "rates": {"delivered_per_s": 1.5, "failed_per_s": 0.1, "filtered_per_s": 0.0},
            "totals": {
                "delivered": delivered,
                "failed": 1,
                "filtered": 0,
                "retried": 2,
                "dead_lettered": len(state.dlq),
            },
            "circuit": {"state": "open", "rate_per_s": 1.0},
            "history": history,
            "updated_at": NOW,
        }

    @app.get(subs + "/dlq/messages")
    def dlq(
        p: str,
        s: str,
        limit: int = Query(50, ge=1, le=500),
        cursor: str | None = None,
        order: str = "newest",
    ) -> Any:
        known(s)
        start = int(cursor or 0)
        rows = state.dlq[start : start + limit]
        more = start + limit < len(state.dlq)
        return {"messages": rows, "next_cursor": str(start + limit) if more else None}

    def take_dlq(
        verb: str,
        limit: int,
        message_ids: list[str] | None,
        group_ids: list[str] | None,
        everything: bool,
    ) -> Any:
        """Unsideline or purge: the messages one selector chooses, at most ``limit``."""
        if message_ids is not None:
            chosen = [m for m in state.dlq if m["message_id"] in message_ids]
        elif group_ids is not None:
            chosen = [m for m in state.dlq if m["group_id"] in group_ids]
        elif everything:
            chosen = list(state.dlq)
        else:
            return JSONResponse(
                {"code": "validation_failed", "message": "choose one selector"}, 422
            )
        done = chosen[:limit]
        state.dlq = [m for m in state.dlq if m not in done]
        return {verb: len(done), "remaining": len(chosen) - len(done)}

    @app.post(subs + "/dlq/messages/unsideline")
    def unsideline(p: str, s: str, body: Annotated[dict[str, Any], Body()]) -> Any:
        known(s)
        limit = int(body.get("limit", 1000))
        return take_dlq(
            "unsidelined",
            limit,
            body.get("message_ids"),
            body.get("group_ids"),
            "failed_before" in body,
        )

    @app.delete(subs + "/dlq/messages")
    def purge(request: Request, p: str, s: str) -> Any:
        known(s)
        q = request.query_params
        limit = int(q.get("limit", 1000))
        return take_dlq(
            "purged",
            limit,
            q.getlist("message_id") or None,
            q.getlist("group_id") or None,
            q.get("all") == "true" or bool(q.get("failed_before")),
        )

    segments = [
        {
            "id": 1,
            "cluster": "kafka-main",
            "backend": "kafka",
            "storage_topic": "httpbus.shop.orders.s1",
            "partitions": 4,
            "state": "sealed",
            "created_at": NOW,
            "sealed_at": "2026-11-22T07:00:00Z",
            "end_positions": {"0": 10, "1": 12, "2": 9, "3": 11},
        },
        {
            "id": 2,
            "cluster": "pulsar-main",
            "backend": "pulsar",
            "storage_topic": "httpbus.shop.orders.s2",
            "partitions": 8,
            "state": "active",
            "created_at": "2026-11-22T07:00:00Z",
            "sealed_at": None,
            "end_positions": None,
        },
    ]

    @app.get("/v1/projects/{p}/topics/{t}")
    def topic(p: str, t: str) -> Any:
        return {
            "project": p,
            "name": t,
            "grouped": True,
            "retention_hours": 168,
            "max_message_bytes": 1048576,
            "segments": segments,
            "produce_pointer": {"segment_id": 2, "version": 4},
            "version": 4,
        }

    @app.get("/v1/projects/{p}/topics/{t}/segments")
    def timeline(p: str, t: str) -> Any:
        return {
            "project": p,
            "topic": t,
            "produce_pointer": {"segment_id": 2, "version": 4},
            "segments": segments,
        }

    cut = "/v1/projects/{p}/topics/{t}/cutover"

    @app.post(cut, status_code=202)
    def start_cutover(p: str, t: str, body: Annotated[dict[str, Any], Body()]) -> Any:
        if state.cutover and state.cutover["phase"] not in ("COMPLETE", "ABORTED", "ROLLED_BACK"):
            return JSONResponse(
                {"code": "CUTOVER_IN_PROGRESS", "message": "a cutover is running"}, 409
            )
        state.cutover = {
            "id": "c1",
            "phase": "PREPARE",
            "from_segment": 1,
            "to_segment": 2,
            "cluster": body["cluster"],
            "partitions": body["partitions"],
            "started_at": NOW,
            "updated_at": NOW,
            "phase_times": {"PREPARE": NOW},
            "producers": {
                m: {"prepared_at": None, "switched_at": None, "committed_at": None}
                for m in ("producer-a", "producer-b")
            },
            "error": None,
        }
        return state.cutover

    @app.get(cut)
    def get_cutover(p: str, t: str) -> Any:
        c = state.cutover
        if c is None:
            raise _not_found("no cutover")
        # Every read moves the fake one step on: acks of the current phase, then the next phase.
        if c["phase"] in ("PREPARE", "SWITCH", "COMMIT") and not state.cutover_holds:
            key = {"PREPARE": "prepared_at", "SWITCH": "switched_at", "COMMIT": "committed_at"}[
                c["phase"]
            ]
            if any(v[key] is None for v in c["producers"].values()):
                for v in c["producers"].values():
                    v[key] = NOW
            elif c["phase"] == "SWITCH" and state.cutover_end == "ROLLED_BACK":
                c["phase"], c["error"] = "ROLLED_BACK", "producer-b did not switch in 5 s"
            else:
                c["phase"] = PHASES[PHASES.index(c["phase"]) + 1]
                c["phase_times"][c["phase"]] = NOW
        return c

    @app.delete(cut)
    def abort(p: str, t: str) -> Any:
        c = state.cutover
        if c is None:
            raise _not_found("no cutover")
        if c["phase"] in ("COMMIT", "COMPLETE"):
            return JSONResponse({"code": "CUTOVER_COMMITTED", "message": "past COMMIT"}, 409)
        c["phase"] = "ABORTED"
        return c

    if reports_url is not None:  # the audit API is the real one, on a report database
        _authenticate(app, admin_token, reports_url)
        app.include_router(audit_api.router(reports_url))
    return app


def _not_found(message: str) -> Exception:
    from core.errors import NotFound

    return NotFound(message)


def bare_app() -> FastAPI:
    """A control plane with none of the contract routes (renders 404 as the real one does)."""
    app = FastAPI()
    http_errors.install(app)
    _authenticate(app, "")
    return app


def _authenticate(app: FastAPI, admin_token: str, reports_url: str = "sqlite://") -> None:
    """The authenticator the UI's pages and the real audit routes ask (UI sessions; users
    only where ``reports_url`` holds them)."""
    store = PrincipalStore.from_url(reports_url)
    app.state.authenticator = Authenticator(admin_token, store, session_identity)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(app: Any) -> Iterator[str]:
    """``app`` on a free loopback port (uvicorn in a thread, lifespan included)."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=_free_port(), log_level="warning", ws="none"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{config.port}"
    finally:
        server.should_exit = True
        thread.join(30)

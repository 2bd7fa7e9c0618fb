"""The one renderer of errors for every HTTP service of httpbus.

Every error answers ``{"code", "message", "details"}`` with the status its ``ErrorCode``
names, whether it was raised as an ``HttpbusError`` or found by request validation. It lives
in ``core`` because all three deployables use it and may not import each other; it does no
I/O of its own.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Mount

from .errors import ErrorCode, HttpbusError, Malformed, ValidationFailed
from .openapi import document_errors


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _error(
    code: ErrorCode,
    message: str,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {"code": code.code, "message": message}
    if details:
        body["details"] = details
    return JSONResponse(body, status_code=code.status, headers=headers)


def error_headers(exc: HttpbusError) -> dict[str, str]:
    """The headers an error answers with: ``Retry-After``, ``WWW-Authenticate``."""
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if exc.code is ErrorCode.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    return headers


def render(exc: HttpbusError) -> tuple[int, dict[str, str], bytes]:
    """Status, headers and JSON body of an error, for handlers that answer in raw ASGI."""
    return exc.code.status, error_headers(exc), json.dumps(exc.to_body()).encode()


async def _httpbus_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HttpbusError)
    return _error(exc.code, exc.message, exc.details, error_headers(exc))


async def _http_exception(request: Request, exc: Exception) -> JSONResponse:
    """Starlette's own errors (no such route, method not allowed) in our format."""
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 404:
        return _error(ErrorCode.NOT_FOUND, f"no such endpoint: {request.method} {request.url.path}")
    if exc.status_code == 405:
        allowed = _allowed(request)
        headers = dict(exc.headers or {})
        if allowed:
            headers["Allow"] = ", ".join(allowed)
        return _error(
            ErrorCode.METHOD_NOT_ALLOWED,
            f"{request.method} is not allowed on {request.url.path}",
            headers=headers,
        )
    return _error(ErrorCode.MALFORMED, str(exc.detail))


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")


def _allowed(request: Request) -> list[str]:
    """Every method some route of the app serves on the request's path. Starlette's ``Allow``
    names only the first route whose path matched, so a path served by a GET route and a PUT
    route answered a DELETE with ``Allow: GET``. Each method is asked of the router as a
    request would be (included routers resolve their routes lazily); mounts are left out."""
    routes = [r for r in request.app.router.routes if not isinstance(r, Mount)]
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in routes):
            allowed.append(method)
    return allowed


def from_validation(errors: Sequence[Any]) -> HttpbusError:
    """The httpbus error for pydantic validation errors: 400 for JSON that does not parse,
    else 422 naming every field and what is wrong with it."""
    if any(e.get("type") == "json_invalid" for e in errors):
        return Malformed("the request body is not valid JSON")
    fields = [{"field": _field(tuple(e["loc"])), "problem": e["msg"]} for e in errors]
    summary = "; ".join(f"{f['field']}: {f['problem']}" for f in fields)
    return ValidationFailed(summary, details={"fields": fields})


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return await _httpbus_error(request, from_validation(exc.errors()))


def install(app: FastAPI) -> None:
    """Install the handlers (httpbus errors and request validation) and document them in the
    app's OpenAPI (:func:`.openapi.document_errors`)."""
    document_errors(app)
    app.add_exception_handler(HttpbusError, _httpbus_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_exception_handler(RequestValidationError, _validation_error)

"""Render every error as ``{"code", "message", "details"}`` with its stable status."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from httpbus.core.errors import ErrorCode, HttpbusError


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


async def _httpbus_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HttpbusError)
    headers = {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    if exc.code is ErrorCode.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    return _error(exc.code, exc.message, exc.details, headers)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _error(ErrorCode.MALFORMED, "the request body is not valid JSON")
    fields = [{"field": _field(tuple(e["loc"])), "problem": e["msg"]} for e in errors]
    summary = "; ".join(f"{f['field']}: {f['problem']}" for f in fields)
    return _error(ErrorCode.VALIDATION_FAILED, summary, {"fields": fields})


def install(app: FastAPI) -> None:
    """Install the handlers: httpbus errors and request validation."""
    app.add_exception_handler(HttpbusError, _httpbus_error)
    app.add_exception_handler(RequestValidationError, _validation_error)

"""OpenAPI documents that tell the truth about errors and names, for every HTTP service.

FastAPI documents a route's success and a 422 with its own validation schema, which httpbus
never sends. Here every operation also documents the errors any request may meet (the body
every error has, :mod:`.http_errors`), path parameters that are names carry the name rule,
and schemas pydantic nests under ``$defs`` are lifted into ``components`` so every
reference resolves. ``tests/integration/test_api_fuzz.py`` holds the services to it with
Schemathesis.

Example::

    app = FastAPI()
    document_errors(app)
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from .errors import ErrorCode
from .names import MAX_NAME

NAME_PARAMETERS = frozenset({"project", "topic", "subscription"})
NAME_PATTERN = "^[A-Za-z0-9][A-Za-z0-9_-]*$"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "enum": sorted({c.code for c in ErrorCode})},
        "message": {"type": "string", "description": "what went wrong and what to fix"},
        "details": {"type": "object"},
    },
}
_REF = {"$ref": "#/components/schemas/Error"}
# What any operation may answer besides its success (500 is a bug, never documented).
_STATUSES = sorted({c.status for c in ErrorCode if c.status not in (405, 500)})


def document_errors(app: FastAPI) -> None:
    """Make ``app.openapi()`` document errors, name rules and resolvable references."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            app.openapi_schema = truthful(schema)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def truthful(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the error answers, name patterns and lifted ``$defs`` (see the module)."""
    schemas = schema.setdefault("components", {}).setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            _errors(operation)
            _names(operation)
    return _lift_defs(schema)


def _errors(operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    for status in _STATUSES:
        phrase = next(c.code for c in ErrorCode if c.status == status)
        documented = responses.get(str(status))
        if documented is None or "HTTPValidationError" in json.dumps(documented):
            responses[str(status)] = {
                "description": phrase.replace("_", " "),
                "content": {"application/json": {"schema": _REF}},
            }


def _names(operation: dict[str, Any]) -> None:
    for parameter in operation.get("parameters", []):
        if parameter.get("in") == "path" and parameter.get("name") in NAME_PARAMETERS:
            found = parameter.setdefault("schema", {"type": "string"})
            found.setdefault("pattern", NAME_PATTERN)
            found.setdefault("maxLength", MAX_NAME)


def _lift_defs(schema: dict[str, Any]) -> dict[str, Any]:
    """Move every nested ``$defs`` entry to ``components/schemas`` and point its references
    there (pydantic's models in hand-written request bodies keep their ``$defs``)."""
    found: dict[str, Any] = {}

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            for name, sub in node.get("$defs", {}).items():
                found.setdefault(name, walk(sub))
            return {key: _moved(key, value, walk) for key, value in node.items() if key != "$defs"}
        if isinstance(node, list):
            return [walk(item) for item in node]
        return node

    lifted: dict[str, Any] = walk(schema)
    for name, sub in found.items():
        lifted["components"]["schemas"].setdefault(name, sub)
    return lifted


def _moved(key: str, value: Any, walk: Any) -> Any:
    if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
        return "#/components/schemas/" + value.removeprefix("#/$defs/")
    return walk(value)

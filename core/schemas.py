"""Topic schemas: JSON Schema (draft 2020-12) documents, versioned, checked at publish.

A topic may carry a schema; each accepted ``PUT`` adds a version (1, 2, ...) if it is
compatible with the previous one (:mod:`core.schema_compat`). The producer compiles each
version once (:class:`CompiledSchema`) and checks every payload of the topic against it;
a refused payload is a :class:`~core.errors.SchemaViolation` naming the JSON path and the
rule, for example::

    compiled = CompiledSchema.compile(3, {"type": "object",
                                          "properties": {"amount": {"minimum": 0}}})
    compiled.problem(b'{"amount": -3}').message
    # '`$.amount`: -3 is less than the minimum of 0'

Two maintained libraries, each where it is best (docs/schemas.md has the figures):
``jsonschema`` (the reference implementation) checks a schema document against the
2020-12 meta-schema at ``PUT`` and reports where it is wrong; ``jsonschema-rs`` (Rust) checks
payloads on the publish path, 13x (small) to 40x (64 KiB) faster than ``jsonschema``.
``fastjsonschema`` supports drafts 04 to 07 only. ``$ref`` resolves within the schema only
(others are refused at ``PUT``; the validator runs offline). ``format`` is an annotation, as
2020-12 says by default.
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from enum import StrEnum
from typing import Any

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from pydantic import BaseModel, ConfigDict, Field

from .errors import SchemaViolation, ValidationFailed
from .json_depth import MAX_DEPTH, too_deep
from .model import utcnow

MAX_SCHEMA_BYTES = 128 * 1024  # a schema's JSON text (a metastore node holds it)
ANY_ITEM = -1  # in a path given to json_path: every item of an array
ANY_PROPERTY = -2  # every property an object does not list
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class Compatibility(StrEnum):
    """What a new version must keep (see docs/schemas.md).

    - ``backward``: the new version accepts every payload the previous one accepted (so
      consumers on the new schema read messages written under the old one);
    - ``forward``: the previous version accepts every payload the new one accepts;
    - ``full``: both; ``none``: nothing is checked.
    """

    BACKWARD = "backward"
    FORWARD = "forward"
    FULL = "full"
    NONE = "none"


class SchemaState(BaseModel):
    """A topic's schema node: its latest version, whether it validates, and its mode."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    latest: int = Field(ge=1)
    active: bool = True
    compatibility: Compatibility = Compatibility.BACKWARD


class SchemaVersion(BaseModel):
    """One version of a topic's schema, as stored (never changed once written)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    version: int = Field(ge=1)
    schema_: dict[str, Any] = Field(alias="schema", serialization_alias="schema")
    compatibility: Compatibility
    created_at: datetime = Field(default_factory=utcnow)

    def dump(self) -> bytes:
        return self.model_dump_json(by_alias=True).encode()


def check_document(schema: dict[str, Any]) -> None:
    """``ValidationFailed`` unless ``schema`` is a valid 2020-12 schema of a sane size."""
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_BYTES:
        raise ValidationFailed(
            f"the schema has {size} bytes of JSON; at most {MAX_SCHEMA_BYTES} are taken",
            details={"field": "schema"},
        )
    declared = schema.get("$schema")
    if declared is not None and declared != Draft202012Validator.META_SCHEMA["$id"]:
        raise ValidationFailed(
            f"$schema {declared!r} is not draft 2020-12; omit it or name "
            f"{Draft202012Validator.META_SCHEMA['$id']}",
            details={"field": "schema.$schema"},
        )
    remote = _remote_ref(schema)
    if remote is not None:
        raise ValidationFailed(
            f"$ref {remote!r} is not within the schema; only local references (#...) resolve",
            details={"field": "schema"},
        )
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        where = json_path(exc.absolute_path)
        raise ValidationFailed(
            f"not a valid JSON Schema (2020-12) at `{where}`: {exc.message}",
            details={"field": "schema", "path": where},
        ) from None
    try:
        _compile(schema)
    except (jsonschema_rs.ValidationError, ValueError) as exc:  # a $ref to nowhere, say
        first = str(exc).split("\n", 1)[0]
        raise ValidationFailed(
            f"the schema does not compile: {first}", details={"field": "schema"}
        ) from None


def _compile(schema: dict[str, Any]) -> jsonschema_rs.Draft202012Validator:
    return jsonschema_rs.Draft202012Validator(schema, validate_formats=False, offline=True)


def _remote_ref(node: Any) -> str | None:
    """The first ``$ref`` / ``$dynamicRef`` that does not point inside the document."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("$ref", "$dynamicRef") and isinstance(value, str):
                if not value.startswith("#"):
                    return value
            else:
                found = _remote_ref(value)
                if found is not None:
                    return found
    elif isinstance(node, list):
        for item in node:
            found = _remote_ref(item)
            if found is not None:
                return found
    return None


def json_path(parts: Any) -> str:
    """``$.a.b[2]["odd key"]`` from a jsonschema path (a deque of str and int).
    :data:`ANY_ITEM` stands for every item (``[*]``), :data:`ANY_PROPERTY` for every
    property not listed (``.*``)."""
    out = ["$"]
    for part in parts:
        if part == ANY_ITEM:
            out.append("[*]")
        elif part == ANY_PROPERTY:
            out.append(".*")
        elif isinstance(part, int):
            out.append(f"[{part}]")
        elif _IDENTIFIER.fullmatch(part):
            out.append(f".{part}")
        else:
            out.append(f"[{json.dumps(part)}]")
    return "".join(out)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class CompiledSchema:
    """One schema version, compiled once; :meth:`problem` checks a payload against it."""

    __slots__ = ("_validator", "header", "version")

    def __init__(self, version: int, validator: jsonschema_rs.Draft202012Validator) -> None:
        self.version = version
        self.header = str(version).encode()  # the stored x-schema-version value
        self._validator = validator

    @classmethod
    def compile(cls, version: int, schema: dict[str, Any]) -> CompiledSchema:
        return cls(version, _compile(schema))

    def problem(self, payload: bytes) -> SchemaViolation | None:
        """Why the payload is refused, or None if it is valid. Nesting is measured before
        the payload is parsed: deeper than :data:`~core.json_depth.MAX_DEPTH` levels, the
        parser and the validator would recurse out of their stacks."""
        if too_deep(payload):
            return SchemaViolation(
                f"`$`: the payload nests arrays and objects deeper than {MAX_DEPTH} levels, "
                "the most a topic with a schema takes",
                details={"path": "$", "rule": "depth", "schema_version": self.version},
            )
        try:
            document = json.loads(payload, parse_constant=_no_constant)
        except (ValueError, UnicodeDecodeError) as exc:
            return SchemaViolation(
                f"`$`: the payload is not JSON ({exc}); this topic takes JSON matching "
                f"schema version {self.version}",
                details={"path": "$", "rule": "json", "schema_version": self.version},
            )
        error = next(iter(self._validator.iter_errors(document)), None)
        if error is None:
            return None
        where = json_path(error.instance_path)
        kind = type(error.kind).__name__  # ValidationErrorKind.Minimum -> "minimum"
        return SchemaViolation(
            f"`{where}`: {error.message}",
            details={
                "path": where,
                "rule": kind[:1].lower() + kind[1:],
                "schema_version": self.version,
            },
        )

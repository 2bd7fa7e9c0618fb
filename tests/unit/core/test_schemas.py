"""Validating payloads against a compiled schema version (core.schemas)."""

from __future__ import annotations

import pytest

from core.errors import ErrorCode, ValidationFailed
from core.schemas import CompiledSchema, check_document

SCHEMA = {
    "type": "object",
    "properties": {
        "amount": {"type": "integer", "minimum": 0},
        "lines": {"type": "array", "items": {"type": "object", "required": ["sku"]}},
        "odd key": {"type": "string"},
    },
    "required": ["amount"],
}


@pytest.mark.parametrize(
    ("payload", "path", "rule", "message"),
    [
        (b'{"amount": -3}', "$.amount", "minimum", "`$.amount`: -3 is less than the minimum of 0"),
        (b"{}", "$", "required", '`$`: "amount" is a required property'),
        (b'{"amount": 1, "lines": [{"sku": 1}, {}]}', "$.lines[1]", "required", None),
        (b'{"amount": 1, "odd key": 2}', '$["odd key"]', "type", None),
        (b"not json", "$", "json", None),
        (b'{"amount": NaN}', "$", "json", None),
        (b"\xff\xfe", "$", "json", None),
    ],
)
def test_refusals_name_the_path_and_the_rule(
    payload: bytes, path: str, rule: str, message: str | None
) -> None:
    problem = CompiledSchema.compile(4, SCHEMA).problem(payload)
    assert problem is not None
    assert problem.code is ErrorCode.SCHEMA_VIOLATION
    assert problem.details == {"path": path, "rule": rule, "schema_version": 4}
    if message is not None:
        assert problem.message == message


def test_a_valid_payload_passes() -> None:
    compiled = CompiledSchema.compile(1, SCHEMA)
    assert compiled.problem(b'{"amount": 0, "lines": [{"sku": "a"}]}') is None
    assert compiled.header == b"1"


def test_remote_and_dangling_refs_are_refused() -> None:
    with pytest.raises(ValidationFailed, match="only local references"):
        check_document({"properties": {"a": {"$ref": "http://169.254.169.254/s.json"}}})
    with pytest.raises(ValidationFailed, match="does not compile"):
        check_document({"$ref": "#/$defs/missing"})


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "nonsense"},
        {"$schema": "http://json-schema.org/draft-07/schema#"},
        {"properties": {"x": {"type": "string"}}, "description": "x" * 200_000},
    ],
)
def test_bad_documents_are_refused(schema: dict[str, object]) -> None:
    with pytest.raises(ValidationFailed):
        check_document(schema)

"""Schema evolutions under each compatibility mode (core.schema_compat)."""

from __future__ import annotations

from typing import Any

import pytest

from core.schema_compat import incompatibility
from core.schemas import Compatibility

B, F, FULL, NONE = (
    Compatibility.BACKWARD,
    Compatibility.FORWARD,
    Compatibility.FULL,
    Compatibility.NONE,
)
ORDER: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
        "status": {"enum": ["new", "paid"]},
        "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {}}}},
    },
    "required": ["id"],
}


def changed(**properties: Any) -> dict[str, Any]:
    return {**ORDER, "properties": {**ORDER["properties"], **properties}}


def closed(schema: dict[str, Any]) -> dict[str, Any]:
    return {**schema, "additionalProperties": False}


# (name, old, new, {mode: expected (path, rule) or None})
CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[Compatibility, Any]]] = [
    (
        "required added",
        ORDER,
        {**ORDER, "required": ["id", "amount"]},
        {B: ("$.amount", "required_added"), F: None, FULL: ("$.amount", "required_added")},
    ),
    (
        "required dropped",
        {**ORDER, "required": ["id", "amount"]},
        ORDER,
        {B: None, F: ("$.amount", "required_removed"), FULL: ("$.amount", "required_removed")},
    ),
    (
        "type widened",
        ORDER,
        changed(amount={"type": "number", "minimum": 0}),
        {B: None, F: ("$.amount", "type_narrowed"), FULL: ("$.amount", "type_narrowed")},
    ),
    (
        "type narrowed",
        changed(id={"type": ["string", "integer"]}),
        ORDER,
        {B: ("$.id", "type_narrowed"), F: None},
    ),
    (
        "enum value added",
        ORDER,
        changed(status={"enum": ["new", "paid", "refunded"]}),
        {B: None, F: ("$.status", "value_refused"), FULL: ("$.status", "value_refused")},
    ),
    (
        "enum value removed",
        ORDER,
        changed(status={"enum": ["new"]}),
        {B: ("$.status", "value_refused"), F: None},
    ),
    (
        "minimum raised",
        ORDER,
        changed(amount={"type": "integer", "minimum": 10}),
        {B: ("$.amount", "bound_tightened"), F: None},
    ),
    (
        "nested item property typed",
        ORDER,
        changed(
            lines={
                "type": "array",
                "items": {"type": "object", "properties": {"sku": {"type": "string"}}},
            }
        ),
        {B: ("$.lines[*].sku", "type_narrowed"), F: None},
    ),
    (
        "optional property added to an open object",
        ORDER,
        changed(note={"type": "string"}),
        {B: ("$.note", "type_narrowed"), F: None},
    ),
    (
        "optional property added to a closed object",
        closed(ORDER),
        closed(changed(note={"type": "string"})),
        {B: None, F: ("$.note", "property_refused"), FULL: ("$.note", "property_refused")},
    ),
    (
        "object closed",
        ORDER,
        closed(ORDER),
        {B: ("$", "additional_properties_closed"), F: None},
    ),
    (
        "description only",
        ORDER,
        {**ORDER, "description": "an order", "title": "Order"},
        {B: None, F: None, FULL: None},
    ),
    (
        "unchecked keyword changed",
        changed(id={"type": "string", "pattern": "^o-"}),
        changed(id={"type": "string", "pattern": "^order-"}),
        {B: ("$.id", "unchecked"), F: ("$.id", "unchecked")},
    ),
]


@pytest.mark.parametrize(("name", "old", "new", "expected"), CASES, ids=[c[0] for c in CASES])
def test_evolution(
    name: str, old: dict[str, Any], new: dict[str, Any], expected: dict[Compatibility, Any]
) -> None:
    for mode, want in expected.items():
        found = incompatibility(old, new, mode)
        got = None if found is None else (found.path, found.rule)
        assert got == want, f"{name} under {mode}: {found}"
    assert incompatibility(old, new, NONE) is None


def test_the_message_names_the_path_and_who_lacks_it() -> None:
    found = incompatibility(ORDER, {**ORDER, "required": ["id", "amount"]}, B)
    assert found is not None
    assert (
        found.message == "required property `amount` added at `$.amount`: old messages may lack it"
    )


def test_identical_schemas_are_compatible_in_every_mode() -> None:
    for mode in Compatibility:
        assert incompatibility(ORDER, dict(ORDER), mode) is None

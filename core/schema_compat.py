"""Is a new schema version compatible with the previous one? (Pure; see docs/schemas.md.)

Every mode reduces to one question asked once or twice: does the *reader* schema accept
every payload the *writer* schema accepts? ``backward`` asks it with the new version as the
reader (consumers on the new schema read old messages), ``forward`` with the old one as the
reader, ``full`` both ways. The answer is structural and conservative: where this module
cannot prove acceptance, it reports an incompatibility (rule ``unchecked``) rather than
guess; ``none`` skips the check.

Example::

    old = {"type": "object", "properties": {"amount": {"type": "integer"}}}
    new = {**old, "required": ["amount"]}
    incompatibility(old, new, Compatibility.BACKWARD).message
    # 'required property `amount` added at `$.amount`: old messages may lack it'
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator

from .schemas import ANY_ITEM, ANY_PROPERTY, Compatibility, json_path

Schema = dict[str, Any] | bool

# Keywords that never change which payloads are valid (format is an annotation in 2020-12).
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "title",
        "description",
        "examples",
        "default",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
        "contentMediaType",
        "contentEncoding",
    }
)
_LOWER = ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains")
_UPPER = ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains")
# Reasoned about below; any other keyword of the reader must equal the writer's.
_HANDLED = frozenset(
    {"type", "enum", "const", "properties", "required", "additionalProperties", "items"}
    | set(_LOWER)
    | set(_UPPER)
)


@dataclass(frozen=True, slots=True)
class Incompatibility:
    """Where the new version breaks the mode: a JSON path, a stable rule, a sentence."""

    path: str
    rule: str
    message: str


@dataclass(frozen=True, slots=True)
class _Roles:
    reader: str  # "new" or "old"
    writer: str


def incompatibility(
    old: dict[str, Any], new: dict[str, Any], mode: Compatibility
) -> Incompatibility | None:
    """The first incompatibility of ``new`` after ``old`` under ``mode``, or None."""
    if mode in (Compatibility.BACKWARD, Compatibility.FULL):
        found = _accepts(new, old, (), _Roles("new", "old"))
        if found is not None:
            return found
    if mode in (Compatibility.FORWARD, Compatibility.FULL):
        return _accepts(old, new, (), _Roles("old", "new"))
    return None


Path = tuple[str | int, ...]


def _at(path: Path) -> str:
    return json_path(path)


def _accepts(reader: Schema, writer: Schema, path: Path, roles: _Roles) -> Incompatibility | None:
    """Whether ``reader`` accepts every instance ``writer`` accepts (None) or where not."""
    if reader is True or reader == {} or reader == writer or writer is False:
        return None
    if writer is True:
        writer = {}
    if reader is False:
        return Incompatibility(
            _at(path),
            "refused",
            f"`{_at(path)}`: the {roles.reader} schema refuses every value here; "
            f"{roles.writer} messages may hold one",
        )
    assert isinstance(reader, dict) and isinstance(writer, dict)
    values = _values(writer)
    if values is not None:  # the writer lists its values: try each on the reader, exactly
        return _each_value(reader, values, path, roles)
    for check in (_unchecked, _type, _enum, _bounds, _object, _array):
        found = check(reader, writer, path, roles)
        if found is not None:
            return found
    return None


def _values(schema: dict[str, Any]) -> list[Any] | None:
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema:
        return list(schema["enum"])
    return None


def _each_value(
    reader: dict[str, Any], values: list[Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    try:
        validator = Draft202012Validator(reader)
        refused = [v for v in values if not validator.is_valid(v)]
    except Exception:  # a $ref that only resolves from the root: cannot tell here
        return _cannot(path, "enum", roles)
    if not refused:
        return None
    return Incompatibility(
        _at(path),
        "value_refused",
        f"`{_at(path)}`: {json.dumps(refused[0])} is allowed by the {roles.writer} schema "
        f"and refused by the {roles.reader} one",
    )


def _cannot(path: Path, keyword: str, roles: _Roles) -> Incompatibility:
    return Incompatibility(
        _at(path),
        "unchecked",
        f"`{_at(path)}`: keyword `{keyword}` differs between the {roles.reader} and the "
        f"{roles.writer} schema and httpbus cannot prove them compatible (docs/schemas.md "
        "lists what is checked; use compatibility none to skip the check)",
    )


def _unchecked(
    reader: dict[str, Any], writer: dict[str, Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    for keyword, value in reader.items():
        if keyword in _HANDLED or keyword in _ANNOTATIONS:
            continue
        if writer.get(keyword) != value:
            return _cannot(path, keyword, roles)
    return None


def _types(schema: dict[str, Any]) -> set[str] | None:
    found = schema.get("type")
    if found is None:
        return None
    return {found} if isinstance(found, str) else set(found)


def _type(
    reader: dict[str, Any], writer: dict[str, Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    takes = _types(reader)
    if takes is None:
        return None
    gives = _types(writer)
    if gives is None:
        extra = ["any type"]
    else:
        extra = sorted(t for t in gives - takes if not (t == "integer" and "number" in takes))
    if not extra:
        return None
    return Incompatibility(
        _at(path),
        "type_narrowed",
        f"`{_at(path)}`: the {roles.writer} schema allows {', '.join(extra)}, the "
        f"{roles.reader} one takes only {', '.join(sorted(takes))}",
    )


def _enum(
    reader: dict[str, Any], writer: dict[str, Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    listed = _values(reader)
    if listed is None:
        return None
    shown = ", ".join(json.dumps(v) for v in listed[:5]) + (", ..." if len(listed) > 5 else "")
    return Incompatibility(
        _at(path),
        "enum_narrowed",
        f"`{_at(path)}`: the {roles.reader} schema allows only {shown}; the {roles.writer} "
        "one allows other values",
    )


def _bounds(
    reader: dict[str, Any], writer: dict[str, Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    for keyword in _LOWER + _UPPER:
        if keyword not in reader:
            continue
        limit, given = reader[keyword], writer.get(keyword)
        tighter = given is None or (given < limit if keyword in _LOWER else given > limit)
        if tighter:
            was = "none" if given is None else json.dumps(given)
            return Incompatibility(
                _at(path),
                "bound_tightened",
                f"`{_at(path)}`: {keyword} is {json.dumps(limit)} in the {roles.reader} "
                f"schema and {was} in the {roles.writer} one",
            )
    return None


def _object(
    reader: dict[str, Any], writer: dict[str, Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    missing = sorted(set(reader.get("required", ())) - set(writer.get("required", ())))
    if missing:
        name = missing[0]
        added = roles.reader == "new"
        return Incompatibility(
            _at((*path, name)),
            "required_added" if added else "required_removed",
            f"required property `{name}` {'added' if added else 'removed'} at "
            f"`{_at((*path, name))}`: {roles.writer} messages may lack it",
        )
    takes: dict[str, Schema] = reader.get("properties", {})
    gives: dict[str, Schema] = writer.get("properties", {})
    # A name the writer does not list takes its additionalProperties (unless patterns apply).
    gives_other: Schema = True if "patternProperties" in writer else _extra(writer)
    for name, schema in takes.items():
        found = _accepts(schema, gives.get(name, gives_other), (*path, name), roles)
        if found is not None:
            return found
    takes_other = _extra(reader)
    if takes_other is True:
        return None
    for name, schema in gives.items():
        if name in takes:
            continue
        if takes_other is False:
            return Incompatibility(
                _at((*path, name)),
                "property_refused",
                f"`{_at((*path, name))}`: property `{name}` of {roles.writer} messages is "
                f"refused by the {roles.reader} schema (additionalProperties)",
            )
        found = _accepts(takes_other, schema, (*path, name), roles)
        if found is not None:
            return found
    if gives_other is False:
        return None
    if takes_other is False:
        return Incompatibility(
            _at(path),
            "additional_properties_closed",
            f"`{_at(path)}`: the {roles.reader} schema refuses properties it does not list "
            f"(additionalProperties false); {roles.writer} messages may carry others",
        )
    return _accepts(takes_other, gives_other, (*path, ANY_PROPERTY), roles)


def _extra(schema: dict[str, Any]) -> Schema:
    found: Schema = schema.get("additionalProperties", True)
    return found


def _array(
    reader: dict[str, Any], writer: dict[str, Any], path: Path, roles: _Roles
) -> Incompatibility | None:
    if "items" not in reader:
        return None
    return _accepts(reader["items"], writer.get("items", True), (*path, ANY_ITEM), roles)

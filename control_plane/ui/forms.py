"""The subscription form: its fields, flattened values, and the API body it becomes.

Form field names are the API's field paths with ``_`` for ``.`` (``endpoint.url`` is
``endpoint_url``), so a 422 naming a field lands next to the input that caused it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NUMBERS = {
    "endpoint_timeout_ms": ("endpoint", "timeout_ms", int),
    "endpoint_disable_after_s": ("endpoint", "disable_after_s", int),
    "retry_max_attempts": ("retry", "max_attempts", int),
    "retry_initial_delay_ms": ("retry", "initial_delay_ms", int),
    "retry_max_delay_ms": ("retry", "max_delay_ms", int),
    "max_in_flight": (None, "max_in_flight", int),
    "delay_ms": (None, "delay_ms", int),
    "rate_limit_per_second": (None, "rate_limit_per_second", float),
    "batch_max_messages": ("batch", "max_messages", int),
    "batch_max_bytes": ("batch", "max_bytes", int),
    "batch_max_wait_ms": ("batch", "max_wait_ms", int),
}
TEXTS = {
    "endpoint_url": ("endpoint", "url"),
    "endpoint_method": ("endpoint", "method"),
    "retry_backoff": ("retry", "backoff"),
    "description": (None, "description"),
    "delivery_format": (None, "delivery_format"),
}


AUTH_TYPES = ("none", "jwt", "oauth2_client_credentials", "mtls")
AUTH_FIELDS = {  # form field -> auth key; the modes that take it (core.endpoint_auth)
    "auth_audience": ("audience", ("jwt", "oauth2_client_credentials")),
    "auth_token_url": ("token_url", ("oauth2_client_credentials",)),
    "auth_client_id": ("client_id", ("oauth2_client_credentials",)),
    "auth_client_secret": ("client_secret", ("oauth2_client_credentials",)),
    "auth_scope": ("scope", ("oauth2_client_credentials",)),
    "auth_client_cert": ("client_cert", ("mtls",)),
    "auth_client_key": ("client_key", ("mtls",)),
    "auth_ca": ("ca", ("mtls",)),
}
WRITE_ONLY = {"auth_client_secret", "auth_client_key"}  # shown empty: empty keeps the stored
MASK = "********"


def auth_values(auth: Mapping[str, Any] | None) -> dict[str, str]:
    """The form values of a subscription's ``auth`` (write-only ones empty)."""
    auth = auth or {}
    values = {"auth_type": str(auth.get("type", "none"))}
    for field, (key, _) in AUTH_FIELDS.items():
        value = auth.get(key)
        values[field] = "" if value is None or field in WRITE_ONLY else str(value)
    return values


def auth_of(form: Mapping[str, str], stored: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``auth`` of ``form``: the chosen type with the fields it takes; a write-only field
    left empty goes back masked when one of that type is stored (the API keeps it). A PEM
    keeps its final line end."""
    if "auth_type" not in form:  # a form without the auth fieldset changes no auth
        return dict(stored or {"type": "none"})
    kind = form.get("auth_type", "").strip() or "none"
    auth: dict[str, Any] = {"type": kind}
    for field, (key, modes) in AUTH_FIELDS.items():
        if kind not in modes:
            continue
        value = form.get(field, "").strip()
        if value:
            auth[key] = value + "\n" if value.startswith("-----BEGIN") else value
        elif field in WRITE_ONLY and stored and stored.get("type") == kind:
            if stored.get(key) == MASK:  # what reads show of a stored value: kept
                auth[key] = MASK
    return auth


def values_of(sub: Mapping[str, Any]) -> dict[str, str]:
    """A subscription (as the API returns it) as form values."""
    values: dict[str, str] = {
        "name": str(sub.get("name", "")),
        "topic": str(sub.get("topic", "")),
        "filter": str(sub.get("filter") or ""),
        "dlq_enabled": "on" if sub.get("dlq_enabled", True) else "",
    }
    for field, (group, key, _) in NUMBERS.items():
        source = sub.get(group, {}) if group else sub
        value = source.get(key) if isinstance(source, Mapping) else None
        values[field] = "" if value is None else str(value)
    for field, (group, key) in TEXTS.items():
        source = sub.get(group, {}) if group else sub
        value = source.get(key) if isinstance(source, Mapping) else None
        values[field] = "" if value is None else str(value)
    values.update(auth_values(sub.get("auth")))
    return values


def body_of(
    form: Mapping[str, str], base: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The settings of ``form`` over ``base`` (the subscription being edited, or ``{}``),
    and the problems found before asking the API (numbers that are not numbers)."""
    body: dict[str, Any] = {
        "endpoint": dict(base.get("endpoint") or {}),
        "retry": dict(base.get("retry") or {}),
        "batch": dict(base.get("batch") or {}),
    }
    problems: dict[str, str] = {}
    for field, (group, key) in TEXTS.items():
        value = form.get(field, "").strip()
        target = body[group] if group else body
        if value:
            target[key] = value
    for field, (group, key, kind) in NUMBERS.items():
        raw = form.get(field, "").strip()
        target = body[group] if group else body
        if not raw:
            if field == "rate_limit_per_second":
                target[key] = None  # empty means no limit
            continue
        try:
            target[key] = kind(raw)
        except ValueError:
            problems[field] = "must be a number" if kind is float else "must be a whole number"
    if not form.get("batch_max_messages", "").strip():
        body["batch"] = None  # no messages per request: one message per request
        for field in ("batch_max_bytes", "batch_max_wait_ms"):
            problems.pop(field, None)
    body["filter"] = form.get("filter", "").strip() or None
    body["dlq_enabled"] = form.get("dlq_enabled") == "on"
    body["auth"] = auth_of(form, base.get("auth"))
    if not body["endpoint"].get("url"):
        problems["endpoint_url"] = "the endpoint URL is required"
    return body, problems


def field_errors(problems: Mapping[str, str]) -> dict[str, str]:
    """API field paths (``endpoint.url``) as form field names (``endpoint_url``)."""
    out: dict[str, str] = {}
    for field, problem in problems.items():
        name = field.replace(".", "_")
        if name.startswith(("retry_", "endpoint_", "batch_")) or name in FORM_FIELDS:
            out[name] = problem.removeprefix("Value error, ")
        else:
            out.setdefault("form", problem)
    return out


FORM_FIELDS = {
    "name",
    "topic",
    "filter",
    "dlq_enabled",
    "start",
    "auth_type",
    *NUMBERS,
    *TEXTS,
    *AUTH_FIELDS,
}

"""What a message's indexed audit events say: where it is stored and, per subscription, its
state and its attempts (the body of ``GET …/messages/{id}``).

A subscription's state is read off its events in time order:

- ``pending``: no event yet (waiting for its turn, a delay, or a paused subscription);
- ``delivering``: attempted, no outcome yet, or replayed from the DLQ (unsidelined,
  recovered), resent or replayed (a window, docs/archive.md) by an operator;
- ``retrying``: an attempt failed and another is due (in place or in a delay level);
- ``delivered``, ``filtered``, ``dead_lettered``: its outcome (a DLQ entry replayed later is
  ``delivering`` again, then its new outcome). A copy passed over after a verified
  migration's switch or rollback (``Segment.skip_ids``) is ``filtered`` after ``delivered``:
  the state stays ``delivered``, the event says why.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from reports.models import TraceEventRow

STATE_OF = {
    "delivered": "delivered",
    "filtered": "filtered",
    "dead_lettered": "dead_lettered",
    "retried": "retrying",
    "unsidelined": "delivering",
    "recovered": "delivering",
    "resent": "delivering",
    "replayed": "delivering",
}


def rfc3339(ms: int | None) -> str | None:
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def message_trace(
    project: str,
    topic: str,
    message_id: str,
    rows: list[TraceEventRow],
    subscriptions: list[str],
) -> dict[str, Any]:
    """The trace of one message from its ``rows`` (oldest first); ``subscriptions`` are the
    topic's (``project/name``), each shown even without an event."""
    accepted = next((r for r in rows if r.type == "accepted"), None)
    by_sub: dict[str, list[TraceEventRow]] = {name: [] for name in subscriptions}
    for row in rows:
        if row.subscription is not None:
            by_sub.setdefault(row.subscription, []).append(row)
    return {
        "message_id": message_id,
        "project": project,
        "topic": topic,
        "stored": _stored(accepted),
        "subscriptions": [_subscription(name, events) for name, events in sorted(by_sub.items())],
    }


def _stored(accepted: TraceEventRow | None) -> dict[str, Any] | None:
    if accepted is None:
        return None  # its accepted event is older than the retention, or was never written
    return {
        "segment": accepted.segment,
        "partition": accepted.partition,
        "position": accepted.position,
        "accepted_at": rfc3339(accepted.at_ms),
        "size": accepted.size,
        "group": accepted.group_id,
        "headers": json.loads(accepted.headers) if accepted.headers else {},
    }


def _subscription(name: str, events: list[TraceEventRow]) -> dict[str, Any]:
    state = "pending"
    attempts = []
    level_ms = None  # the delay level the next attempt waited in
    for event in events:
        if event.type == "attempted":
            ok = event.status is not None and 200 <= event.status < 300
            state = "delivering" if ok else "retrying"
            attempts.append({**_fields(event, ATTEMPT_FIELDS), "waited_in_level_ms": level_ms})
            level_ms = None
        elif not (event.type == "filtered" and state == "delivered"):
            state = STATE_OF.get(event.type, state)
            level_ms = event.level_ms if event.type == "retried" else None
    return {
        "subscription": name,
        "state": state,
        "attempts": attempts,
        "events": [_event(e) for e in events],
    }


ATTEMPT_FIELDS = ("attempt", "status", "error", "latency_ms", "answer")
EVENT_FIELDS = (*ATTEMPT_FIELDS, "level_ms")


def _fields(event: TraceEventRow, names: tuple[str, ...]) -> dict[str, Any]:
    return {"at": rfc3339(event.at_ms), **{name: getattr(event, name) for name in names}}


def _event(event: TraceEventRow) -> dict[str, Any]:
    found = {k: v for k, v in _fields(event, EVENT_FIELDS).items() if v is not None}
    return {"type": event.type, **found}

"""What a message's indexed audit events say: where it is stored and, per subscription, its
state and its attempts (the body of ``GET …/messages/{id}``).

A subscription's state is read off its events in time order:

- ``pending``: no event yet (waiting for its turn, a delay, or a paused subscription);
- ``delivering``: attempted, no outcome yet, or replayed from the DLQ;
- ``retrying``: an attempt failed and another is due (in place or in a delay level);
- ``delivered``, ``filtered``, ``dead_lettered``: its outcome (a DLQ entry replayed later is
  ``delivering`` again, then its new outcome).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reports.models import TraceEventRow

STATE_OF = {
    "delivered": "delivered",
    "filtered": "filtered",
    "dead_lettered": "dead_lettered",
    "retried": "retrying",
    "unsidelined": "delivering",
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
    }


def _subscription(name: str, events: list[TraceEventRow]) -> dict[str, Any]:
    state = "pending"
    attempts = []
    for event in events:
        if event.type == "attempted":
            ok = event.status is not None and 200 <= event.status < 300
            state = "delivering" if ok else "retrying"
            attempts.append(
                {
                    "at": rfc3339(event.at_ms),
                    "attempt": event.attempt,
                    "status": event.status,
                    "error": event.error,
                }
            )
        else:
            state = STATE_OF.get(event.type, state)
    return {
        "subscription": name,
        "state": state,
        "attempts": attempts,
        "events": [_event(e) for e in events],
    }


def _event(event: TraceEventRow) -> dict[str, Any]:
    found: dict[str, Any] = {"type": event.type, "at": rfc3339(event.at_ms)}
    for key in ("attempt", "status", "error"):
        value = getattr(event, key)
        if value is not None:
            found[key] = value
    return found

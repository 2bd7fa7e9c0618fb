"""The status of a sharded subscription: the figures of its shards, added up.

Each shard's worker publishes its own document (``/status/{p}:{s}#k``, the same shape as an
unsharded subscription's). The subscription's figures are their sums: in flight, rates,
totals, lag, failures by status and every history bucket; the newest last failure and the
oldest unacked message; the circuit shown is the least healthy one (open, then
half open, then closed); ``updated_at`` the latest. The DLQ count is the sum of the shards'
counts (each counts the entries of its own groups), and unknown while a shard has none.
Per partition, the committed position is the lowest over the shards that read the
partition and the lag the highest: the partition is as far behind as its slowest reader.
"""

from __future__ import annotations

from typing import Any

Doc = dict[str, Any]
_SEVERITY = {"open": 2, "half_open": 1, "closed": 0}


def merge_figures(docs: list[Doc]) -> Doc:
    """One document with the sums of the shards' documents (see the module doc)."""
    if len(docs) == 1:
        return docs[0]
    history: dict[int, list[int | None]] = {}
    for doc in docs:
        for row in doc.get("history", []):
            if len(row) >= 4:
                into = history.setdefault(int(row[0]), [0, 0, 0, 0, None])
                for i, value in enumerate(row[1:5]):
                    into[i] = int(into[i] or 0) + int(value or 0)
                if len(row) > 5 and row[5] is not None:
                    into[4] = int(into[4] or 0) + int(row[5])
    stamps = [d["updated_at"] for d in docs if d.get("updated_at")]
    lags = [int(d["lag"]) for d in docs if d.get("lag") is not None]
    oldest = [int(d["oldest_unacked_ms"]) for d in docs if d.get("oldest_unacked_ms")]
    failures = [d["last_failure"] for d in docs if d.get("last_failure")]
    failing = [int(d["commit_failing_since_ms"]) for d in docs if d.get("commit_failing_since_ms")]
    return {
        "worker": next((d["worker"] for d in docs if d.get("worker")), None),
        "in_flight": sum(int(d.get("in_flight", 0)) for d in docs),
        "rates": _sum_maps([d.get("rates", {}) for d in docs]),
        "totals": _sum_maps([d.get("totals", {}) for d in docs]),
        "circuit": worst_circuit(docs),
        "lag": sum(lags) if lags else None,
        "oldest_unacked_ms": min(oldest, default=None),
        "commit_failing_since_ms": min(failing, default=None),
        "failures": _sum_maps([d.get("failures", {}) for d in docs]),
        "last_failure": max(failures, key=lambda f: int(f.get("at_ms") or 0), default=None),
        "dlq": merge_dlq(docs),
        "history": [[t, *history[t]] for t in sorted(history)],
        "updated_at": max(stamps, default=None),
    }


def merge_dlq(docs: list[Doc]) -> Doc | None:
    """The shards' DLQ counts added up; None while a shard has not counted."""
    counts: list[Doc] = [d["dlq"] for d in docs if isinstance(d.get("dlq"), dict)]
    if not counts or len(counts) < len(docs):
        return None
    out: Doc = {k: sum(int(c.get(k, 0)) for c in counts) for k in DLQ_COUNTS}
    out["live"] = all(bool(c.get("live")) for c in counts)
    return out


DLQ_COUNTS = ("size", "failed_heads", "sidelined")


def dlq_figures(counted: object) -> dict[str, Any] | None:
    """The DLQ count a worker published (``delivery_workers.status``), as the API shows it:
    size, failed heads, sidelined, ``counted_by`` worker and whether it is ``live``."""
    if not isinstance(counted, dict):
        return None
    try:
        out: dict[str, Any] = {k: int(counted[k]) for k in DLQ_COUNTS}
    except (KeyError, TypeError, ValueError):
        return None
    return out | {"counted_by": "worker", "live": bool(counted.get("live"))}


def worst_circuit(docs: list[Doc]) -> Doc | None:
    """The least healthy circuit the shards' documents report (open, then half open, then
    closed), or None when no worker reported one."""
    circuits = [d["circuit"] for d in docs if d.get("circuit")]
    return max(circuits, key=lambda c: _SEVERITY.get(c.get("state"), 0), default=None)


def _sum_maps(maps: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for figures in maps:
        for name, value in figures.items():
            out[name] = out.get(name, 0) + value
    return out


def merge_partitions(per_shard: list[list[dict[str, int]]]) -> list[dict[str, int]]:
    """Per partition: the lowest committed position and the highest lag over the shards
    that read it (each shard lists only the partitions it reads)."""
    merged: dict[int, dict[str, int]] = {}
    for rows in per_shard:
        for row in rows:
            seen = merged.get(row["partition"])
            if seen is None:
                merged[row["partition"]] = dict(row)
                continue
            seen["committed"] = min(seen["committed"], row["committed"])
            seen["lag"] = max(seen["lag"], row["lag"])
    return [merged[p] for p in sorted(merged)]

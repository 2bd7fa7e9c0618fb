"""The platform at a glance, for the on-call operator (``GET /v1/overview``, the UI's home
page, ``httpbus overview``).

It answers five questions without another request: **what is failing** (open and half-open
circuits, subscriptions whose attempts fail now, the newest failures), **where is the lag**
(the subscriptions with the largest lag and the oldest unacked message), **which DLQs grow**
(messages dead-lettered in the last hour), **which endpoints are disabled**, and **what is
being moved** (cutovers, failovers, verified migrations in flight); with the platform's
delivery and publish rates and, for admins, the last audit findings.

Everything is read in bulk, never per subscription from storage: the subscriptions of each
visible project (their nodes), the workers' published figures (one listing of
``/status`` and a read of each node, all at once), the markers of cutovers, migrations and
unsealed segments. The publish rate is the growth of every topic's produce segment's end
positions between two overviews of this process (the first one can only say "measuring");
no producer reports its rate for every project, and asking storage for a rate would cost a
read per topic per second.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from control_plane.services.shard_status import merge_figures
from core.errors import HttpbusError
from core.model import SegmentState, Subscription
from core.shards import parse_unit_key
from metastore import paths
from metastore.protocol import MetaStore
from segments.protocol import SegmentStore

BUCKET_S = 10
HOUR_S = 3_600
TOP = 10  # rows per ranking
END_TIMEOUT_S = 0.3  # a topic whose storage does not answer within this is left out


@dataclass
class PublishSampler:
    """The previous end-position total of each topic, so two overviews make a rate. A
    sample younger than ``MIN_GAP_S`` is not replaced: the last rate is answered again."""

    seen: dict[str, tuple[float, int]] = field(default_factory=dict)
    last: dict[str, float] = field(default_factory=dict)

    MIN_GAP_S = 0.5

    def rate(self, key: str, now: float, total: int) -> float | None:
        before = self.seen.get(key)
        if before is not None and now - before[0] < self.MIN_GAP_S:
            return self.last.get(key)
        self.seen[key] = (now, total)
        if before is None:
            return None
        self.last[key] = max(0.0, (total - before[1]) / (now - before[0]))
        return self.last[key]


@dataclass(frozen=True)
class _Sub:
    sub: Subscription
    figures: dict[str, Any]  # the workers' published figures, merged over shards; {}: none


class Overview:
    """See the module doc. ``stores`` answer the publish rate; ``sampler`` keeps the last
    sample between calls (one per control plane process)."""

    def __init__(
        self,
        meta: MetaStore,
        stores: Mapping[str, SegmentStore],
        sampler: PublishSampler,
    ) -> None:
        self.meta = meta
        self.stores = stores
        self.sampler = sampler

    async def read(self, projects: Iterable[str] | None) -> dict[str, Any]:
        """The overview of ``projects`` (None: every project)."""
        started = time.perf_counter()
        now = time.time()
        every = await self.meta.children(paths.PROJECTS)
        visible = sorted(every if projects is None else set(every) & set(projects))
        subs, statuses, cutovers, migrations, failovers, published = await asyncio.gather(
            self._subscriptions(visible),
            self._statuses(set(visible)),
            self._moving(paths.ACTIVE_CUTOVERS, set(visible), paths.cutover),
            self._moving(paths.ACTIVE_MIGRATIONS, set(visible), paths.migration),
            self._failovers(set(visible)),
            self._publish(visible, now),
        )
        rows = [_Sub(s, statuses.get((s.project, s.name), {})) for s in subs]
        return {
            "projects": visible,
            "subscriptions": len(rows),
            "rates": _rates(rows, published),
            "history": _history(rows, now),
            "failing": _failing(rows),
            "lag": _ranked(rows, "lag"),
            "oldest_unacked": _ranked(rows, "oldest"),
            "dlq_growing": _dlq_growing(rows, now),
            "disabled": [_disabled(r.sub) for r in rows if r.sub.disabled is not None],
            "in_flight": {"cutovers": cutovers, "migrations": migrations, "failovers": failovers},
            "read_ms": round((time.perf_counter() - started) * 1000, 1),
            "at": _iso(now),
        }

    # ------------------------------------------------------------ bulk reads
    async def _subscriptions(self, projects: list[str]) -> list[Subscription]:
        names = await asyncio.gather(
            *(self.meta.children(paths.subscriptions(p)) for p in projects)
        )
        keys = [(p, s) for p, found in zip(projects, names, strict=True) for s in found]
        nodes = await asyncio.gather(*(self.meta.get(paths.subscription(p, s)) for p, s in keys))
        return [
            Subscription.model_validate_json(node.data)
            for node in nodes
            if node is not None and node.data
        ]

    async def _statuses(self, projects: set[str]) -> dict[tuple[str, str], dict[str, Any]]:
        """Every published status document of the visible projects, merged per subscription
        (a sharded one publishes one per shard)."""
        names = [n for n in await self.meta.children(paths.STATUS) if _project(n) in projects]
        nodes = await asyncio.gather(*(self.meta.get(f"{paths.STATUS}/{n}") for n in names))
        docs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name, node in zip(names, nodes, strict=True):
            if node is None or not node.data:
                continue
            with contextlib.suppress(ValueError):
                project, sub, _ = parse_unit_key(name.replace(":", "/", 1))
                docs.setdefault((project, sub), []).append(json.loads(node.data))
        return {key: merge_figures(found) for key, found in docs.items()}

    async def _moving(self, marks: str, projects: set[str], record: Any) -> list[dict[str, Any]]:
        """The cutovers (or migrations) the leaders still drive, as their records say."""
        names = [n for n in await self.meta.children(marks) if _project(n) in projects]
        pairs = [tuple(n.split(":", 1)) for n in names]
        nodes = await asyncio.gather(*(self.meta.get(record(p, t)) for p, t in pairs))
        out = []
        for (project, topic), node in zip(pairs, nodes, strict=True):
            doc: dict[str, Any] = {}
            if node is not None and node.data:
                with contextlib.suppress(ValueError):
                    doc = json.loads(node.data)
            out.append(
                {
                    "project": project,
                    "topic": topic,
                    "phase": doc.get("phase") or doc.get("state"),
                    "from_segment": doc.get("from_segment"),
                    "to_segment": doc.get("to_segment"),
                    "cluster": doc.get("cluster") or doc.get("target_cluster"),
                    "started_at": doc.get("started_at"),
                }
            )
        return out

    async def _failovers(self, projects: set[str]) -> list[dict[str, Any]]:
        """Segments a failover left unsealed: their topics write to a standby now."""
        out = []
        for name in await self.meta.children(paths.FAILOVER_UNSEALED):
            parsed = paths.parse_unsealed(name)
            if parsed is not None and parsed[0] in projects:
                out.append({"project": parsed[0], "topic": parsed[1], "segment": parsed[2]})
        return out

    async def _publish(self, projects: list[str], now: float) -> dict[str, Any]:
        """Messages per second published to the visible topics (see the module doc)."""
        topics = await asyncio.gather(*(self.meta.children(paths.topics(p)) for p in projects))
        keys = [(p, t) for p, found in zip(projects, topics, strict=True) for t in found]
        ends = await asyncio.gather(*(self._end(p, t) for p, t in keys))
        per_topic: list[tuple[str, str, float | None]] = []
        for (project, topic), total in zip(keys, ends, strict=True):
            if total is not None:
                rate = self.sampler.rate(f"{project}/{topic}", now, total)
                per_topic.append((project, topic, rate))
        rates = [r for _, _, r in per_topic if r is not None]
        per_topic.sort(key=lambda t: -(t[2] or 0.0))
        return {
            "per_s": round(sum(rates), 2) if rates or not per_topic else None,
            "topics": [
                {"project": p, "topic": t, "per_s": None if r is None else round(r, 2)}
                for p, t, r in per_topic[:TOP]
            ],
        }

    async def _end(self, project: str, topic: str) -> int | None:
        """The sum of the end positions of the topic's produce segment (None: unknown)."""
        try:
            pointer = await self.meta.get(paths.produce_pointer(project, topic))
            if pointer is None:
                return None
            segment_id = int(json.loads(pointer.data)["segment_id"])
            node = await self.meta.get(paths.segment(project, topic, segment_id))
            if node is None:
                return None
            seg = json.loads(node.data)
            store = self.stores.get(str(seg.get("cluster")))
            if store is None or seg.get("state") == SegmentState.UNSEALED.value:
                return None
            async with asyncio.timeout(END_TIMEOUT_S):
                ends = await store.end_positions(str(seg["storage_topic"]))
            return sum(ends.values())
        except (HttpbusError, TimeoutError, ValueError, KeyError, TypeError):
            return None


def _project(name: str) -> str:
    return name.split(":", 1)[0]


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).isoformat().replace("+00:00", "Z")


def _key(sub: Subscription) -> dict[str, Any]:
    return {"project": sub.project, "subscription": sub.name, "topic": sub.topic}


def _state(row: _Sub) -> str:
    sub = row.sub
    if sub.disabled is not None:
        return "disabled"
    if sub.paused:
        return "paused"
    return "running" if row.figures else "unassigned"


def _circuit(row: _Sub) -> str | None:
    found = row.figures.get("circuit")
    return str(found["state"]) if isinstance(found, dict) and found.get("state") else None


def _rates(rows: list[_Sub], published: dict[str, Any]) -> dict[str, Any]:
    totals = {"delivered_per_s": 0.0, "failed_per_s": 0.0, "filtered_per_s": 0.0}
    for row in rows:
        for name in totals:
            totals[name] += float((row.figures.get("rates") or {}).get(name, 0.0))
    out: dict[str, Any] = {k: round(v, 2) for k, v in totals.items()}
    out["published_per_s"] = published["per_s"]
    out["published_topics"] = published["topics"]
    return out


def _history(rows: list[_Sub], now: float) -> list[dict[str, int]]:
    """The last hour in 10-second buckets over every visible subscription."""
    sums: dict[int, list[int]] = {}
    for row in rows:
        for bucket in row.figures.get("history") or []:
            if len(bucket) >= 4:
                into = sums.setdefault(int(bucket[0]), [0, 0, 0])
                into[0] += int(bucket[1] or 0)
                into[1] += int(bucket[2] or 0)
                into[2] += int(bucket[4] or 0) if len(bucket) > 4 else 0
    last = int(now) // BUCKET_S * BUCKET_S
    out = []
    for t in range(last - HOUR_S + BUCKET_S, last + BUCKET_S, BUCKET_S):
        d, f, dl = sums.get(t, (0, 0, 0))
        out.append({"t": t, "delivered": d, "failed": f, "dead_lettered": dl})
    return out


def _failure(row: _Sub) -> dict[str, Any] | None:
    found = row.figures.get("last_failure")
    if not isinstance(found, dict):
        return None
    at = found.get("at_ms")
    return {
        "at": _iso(at / 1000) if isinstance(at, int) else None,
        "status": found.get("status"),
        "error": found.get("error"),
    }


def _failing(rows: list[_Sub]) -> list[dict[str, Any]]:
    """Subscriptions whose circuit is not closed or whose attempts fail now, worst first."""
    out = []
    for row in rows:
        circuit = _circuit(row)
        failed = float((row.figures.get("rates") or {}).get("failed_per_s", 0.0))
        if circuit not in ("open", "half_open") and failed <= 0:
            continue
        out.append(
            _key(row.sub)
            | {
                "circuit": circuit,
                "failed_per_s": failed,
                "failures": row.figures.get("failures") or {},
                "last_failure": _failure(row),
                "state": _state(row),
            }
        )
    severity = {"open": 0, "half_open": 1}
    out.sort(key=lambda r: (severity.get(r["circuit"], 2), -r["failed_per_s"]))
    return out


def _ranked(rows: list[_Sub], by: str) -> list[dict[str, Any]]:
    """The TOP subscriptions with the largest lag, or the oldest unacked message."""
    found = []
    for row in rows:
        lag = row.figures.get("lag")
        oldest = row.figures.get("oldest_unacked_ms")
        value = lag if by == "lag" else oldest
        if not isinstance(value, int) or value <= 0:
            continue
        found.append(
            (
                value,
                _key(row.sub)
                | {
                    "lag": lag,
                    "oldest_unacked_at": _iso(oldest / 1000) if isinstance(oldest, int) else None,
                    "state": _state(row),
                },
            )
        )
    found.sort(key=lambda pair: -pair[0] if by == "lag" else pair[0])
    return [row for _, row in found[:TOP]]


def _dlq_growing(rows: list[_Sub], now: float) -> list[dict[str, Any]]:
    """Subscriptions that dead-lettered messages in the last hour, most first."""
    since = now - HOUR_S
    out = []
    for row in rows:
        buckets = [b for b in row.figures.get("history") or [] if len(b) > 4 and int(b[0]) >= since]
        grew = sum(int(b[4] or 0) for b in buckets)
        if grew <= 0:
            continue
        last = max(int(b[0]) for b in buckets if int(b[4] or 0) > 0)
        out.append(_key(row.sub) | {"last_hour": grew, "last_at": _iso(last)})
    out.sort(key=lambda r: -r["last_hour"])
    return out


def _disabled(sub: Subscription) -> dict[str, Any]:
    assert sub.disabled is not None
    return _key(sub) | {
        "endpoint": sub.endpoint.url,
        "disabled_at": sub.disabled.disabled_at.isoformat().replace("+00:00", "Z"),
        "failing_since": sub.disabled.failing_since.isoformat().replace("+00:00", "Z"),
        "last_error": sub.disabled.last_error,
    }

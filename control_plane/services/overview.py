"""The platform at a glance, for the on-call operator (``GET /v1/overview``, the UI's home
page, ``httpbus overview``).

It answers five questions without another request: **what is failing** (open and half-open
circuits, subscriptions whose attempts fail now, the newest failures), **where is the lag**
(the subscriptions with the largest lag and the oldest unacked message), **which DLQs grow**
(messages dead-lettered in the last hour; with what each DLQ holds, its size and sidelined
followers, as the workers count it), **which endpoints are disabled**, and **what is
being moved** (cutovers, failovers, verified migrations in flight); with the platform's
delivery and publish rates and, for admins, the last audit findings.

Everything is read in bulk (``MetaStore.get_many``: one call to the embedded store,
pipelined requests to ZooKeeper), never per subscription from storage: the subscriptions of
each visible project (their nodes), the workers' published figures (one listing of
``/status``, then every node at once), the markers of cutovers, migrations and unsealed
segments. The publish rate is the growth of every topic's produce segment's end
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

import orjson

from control_plane.services.shard_status import dlq_figures, merge_figures
from core.errors import HttpbusError
from core.model import SegmentState, Subscription
from core.shards import parse_unit_key
from metastore import paths
from metastore.protocol import MetaStore, Node
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
        hour = _Hour(now)
        subs, statuses, cutovers, migrations, failovers, published = await asyncio.gather(
            self._subscriptions(visible),
            self._statuses(set(visible), hour),
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
            "history": hour.buckets(),
            "failing": _failing(rows),
            "lag": _ranked(rows, "lag"),
            "oldest_unacked": _ranked(rows, "oldest"),
            "dlq_growing": _dlq_growing(rows, hour),
            "disabled": [_disabled(r.sub) for r in rows if r.sub.disabled is not None],
            "in_flight": {"cutovers": cutovers, "migrations": migrations, "failovers": failovers},
            "read_ms": round((time.perf_counter() - started) * 1000, 1),
            "at": _iso(now),
        }

    # ------------------------------------------------------------ bulk reads
    async def _subscriptions(self, projects: list[str]) -> list[Subscription]:
        names = await self.meta.children_many([paths.subscriptions(p) for p in projects])
        keys = [(p, s) for p, found in zip(projects, names, strict=True) for s in found]
        nodes = await self.meta.get_many([paths.subscription(p, s) for p, s in keys])
        return [
            Subscription.model_validate_json(node.data)
            for node in nodes
            if node is not None and node.data
        ]

    async def _statuses(
        self, projects: set[str], hour: _Hour
    ) -> dict[tuple[str, str], dict[str, Any]]:
        """Every published status document of the visible projects, merged per subscription
        (a sharded one publishes one per shard). Each document's history is folded into
        ``hour`` as it is read and dropped: a thousand hours of 10-second buckets kept as
        lists would cost more in the garbage collector than in the reading."""
        names = [n for n in await self.meta.children(paths.STATUS) if _project(n) in projects]
        nodes = await self.meta.get_many([f"{paths.STATUS}/{n}" for n in names])
        docs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name, node in zip(names, nodes, strict=True):
            if node is None or not node.data:
                continue
            with contextlib.suppress(ValueError):
                project, sub, _ = parse_unit_key(name.replace(":", "/", 1))
                doc = orjson.loads(node.data)
                hour.add((project, sub), doc.pop("history", None) or ())
                docs.setdefault((project, sub), []).append(doc)
        return {key: merge_figures(found) for key, found in docs.items()}

    async def _moving(self, marks: str, projects: set[str], record: Any) -> list[dict[str, Any]]:
        """The cutovers (or migrations) the leaders still drive, as their records say."""
        names = [n for n in await self.meta.children(marks) if _project(n) in projects]
        pairs = [tuple(n.split(":", 1)) for n in names]
        nodes = await self.meta.get_many([record(p, t) for p, t in pairs])
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
        topics = await self.meta.children_many([paths.topics(p) for p in projects])
        keys = [(p, t) for p, found in zip(projects, topics, strict=True) for t in found]
        pointers = await self.meta.get_many([paths.produce_pointer(p, t) for p, t in keys])
        wanted = [
            (key, paths.segment(*key, _segment_id(node)))
            for key, node in zip(keys, pointers, strict=True)
            if _segment_id(node)
        ]
        segments = await self.meta.get_many([where for _, where in wanted])
        ends = await asyncio.gather(*(self._end(node) for node in segments))
        per_topic: list[tuple[str, str, float | None]] = []
        for ((project, topic), _), total in zip(wanted, ends, strict=True):
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

    async def _end(self, node: Node | None) -> int | None:
        """The sum of the end positions of a produce segment (None: unknown, or its storage
        did not answer within ``END_TIMEOUT_S``)."""
        try:
            seg = json.loads(node.data) if node is not None else None
            if not seg or seg.get("state") == SegmentState.UNSEALED.value:
                return None
            store = self.stores.get(str(seg.get("cluster")))
            if store is None:
                return None
            async with asyncio.timeout(END_TIMEOUT_S):
                ends = await store.end_positions(str(seg["storage_topic"]))
            return sum(ends.values())
        except (HttpbusError, TimeoutError, ValueError, KeyError, TypeError):
            return None


def _segment_id(pointer: Node | None) -> int:
    """The segment a produce pointer names (0: none or unreadable)."""
    if pointer is None or not pointer.data:
        return 0
    try:
        return int(json.loads(pointer.data)["segment_id"])
    except (ValueError, KeyError, TypeError):
        return 0


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


class _Hour:
    """The last hour over every visible subscription: the 10-second buckets summed
    (delivered, failed, dead-lettered) and, per subscription, what it dead-lettered."""

    def __init__(self, now: float) -> None:
        self.last = int(now) // BUCKET_S * BUCKET_S
        self.first = self.last - HOUR_S + BUCKET_S
        n = HOUR_S // BUCKET_S
        self.delivered, self.failed, self.dead = [0] * n, [0] * n, [0] * n
        self.dead_lettered: dict[tuple[str, str], tuple[int, int]] = {}  # (count, last t)

    def add(self, key: tuple[str, str], history: Iterable[list[Any]]) -> None:
        count, latest = self.dead_lettered.get(key, (0, 0))
        first, last = self.first, self.last
        for bucket in history:
            t = bucket[0]
            if len(bucket) < 4 or not first <= t <= last:
                continue
            i = (t - first) // BUCKET_S
            self.delivered[i] += bucket[1] or 0
            self.failed[i] += bucket[2] or 0
            if len(bucket) > 4 and bucket[4]:
                self.dead[i] += bucket[4]
                count += bucket[4]
                latest = max(latest, t)
        if count:
            self.dead_lettered[key] = (count, latest)

    def buckets(self) -> list[dict[str, int]]:
        return [
            {"t": self.first + i * BUCKET_S, "delivered": d, "failed": f, "dead_lettered": dl}
            for i, (d, f, dl) in enumerate(zip(self.delivered, self.failed, self.dead, strict=True))
        ]


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
                "dlq": dlq_figures(row.figures.get("dlq")),
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


def _dlq_growing(rows: list[_Sub], hour: _Hour) -> list[dict[str, Any]]:
    """Subscriptions that dead-lettered messages in the last hour, most first."""
    out = []
    for row in rows:
        found = hour.dead_lettered.get((row.sub.project, row.sub.name))
        if found is not None:
            out.append(
                _key(row.sub)
                | {
                    "last_hour": found[0],
                    "last_at": _iso(found[1]),
                    "dlq": dlq_figures(row.figures.get("dlq")),
                }
            )
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

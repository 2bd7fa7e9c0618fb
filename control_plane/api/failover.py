"""``GET /v1/projects/{project}/topics/{topic}/failover``: a topic's failover status — its
standby clusters, the segments failovers left unsealed, the latest failover, and what the
producers report of the active segment now (docs/failover.md)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter

from control_plane.api.auth import VIEWER
from control_plane.api.deps import CutoversDep, ProjectName, TopicName
from core.errors import NotFound
from core.model import SegmentState
from segments.failover.records import FailoverRecords

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}/failover", tags=["failover"])


@router.get("", **VIEWER)
async def failover_status(
    project: ProjectName, topic: TopicName, cutovers: CutoversDep
) -> dict[str, Any]:
    """Standby clusters and mode, the active segment, the segments left unsealed (the leader
    seals them when their cluster is back), the latest failover, and the producers' latest
    write figures of the active segment."""
    found = await cutovers.catalog.get_topic(project, topic)
    active = found.active_segment
    try:
        latest = await cutovers.get(project, topic)
    except NotFound:
        latest = None
    reports = await FailoverRecords(cutovers.metastore).reports()
    now = time.time()
    mine = reports.get((project, topic, active.id), []) if active is not None else []
    health = [
        {**r.model_dump(mode="json", exclude={"project", "topic"}), "age_s": round(now - r.at, 1)}
        for r in mine
    ]
    return {
        "project": project,
        "topic": topic,
        "failover": found.failover.model_dump(mode="json") if found.failover else None,
        "active_segment": active.model_dump(mode="json") if active else None,
        "unsealed": [s.id for s in found.segments if s.state is SegmentState.UNSEALED],
        "failover_segments": [
            s.model_dump(mode="json")
            for s in found.segments
            if s.opened_by is not None or s.unsealed_at is not None
        ],
        "latest": latest.public() if latest is not None and latest.failover else None,
        "health": sorted(health, key=lambda r: str(r["member"])),
    }

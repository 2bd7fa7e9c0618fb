"""``/v1/projects/{project}/topics/{topic}/cutover``: start, read and abort a cutover."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, status
from pydantic import BaseModel, ConfigDict, Field

from control_plane.api.auth import OWNER, VIEWER
from control_plane.api.deps import CutoversDep, ProjectName, TopicName
from core.model import MAX_PARTITIONS
from core.names import Name

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}/cutover", tags=["cutover"])


class CutoverStart(BaseModel):
    """Where the topic moves: a configured storage cluster and a partition count."""

    model_config = ConfigDict(extra="forbid")

    cluster: Name = Field(description="a configured storage cluster, e.g. pulsar-main")
    partitions: int = Field(ge=1, le=MAX_PARTITIONS, description=f"1 to {MAX_PARTITIONS}")


class ProducerAcks(BaseModel):
    prepared_at: datetime | None
    switched_at: datetime | None
    committed_at: datetime | None


class CutoverView(BaseModel):
    """A cutover as the API shows it."""

    id: str
    phase: Literal["PREPARE", "SWITCH", "COMMIT", "COMPLETE", "ABORTED", "ROLLED_BACK"]
    from_segment: int
    to_segment: int
    cluster: str
    partitions: int
    started_at: datetime
    updated_at: datetime
    phase_times: dict[str, datetime]
    step_times: dict[str, datetime] = Field(
        default_factory=dict,
        description="inside COMMIT: when the old segment was fenced ('fenced'), the produce "
        "pointer moved ('pointer_moved') and the final ends were recorded ('ends_settled')",
    )
    producers: dict[str, ProducerAcks]
    error: str | None
    failover: bool = Field(
        default=False, description="an automatic failover: the old segment was left unsealed"
    )
    reason: str | None = Field(default=None, description="why the failover began")


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=CutoverView, **OWNER)
async def start_cutover(
    project: ProjectName, topic: TopicName, body: CutoverStart, cutovers: CutoversDep
) -> dict[str, Any]:
    """Begin moving the topic to a fresh segment; 409 while another cutover runs."""
    state = await cutovers.start(project, topic, body.cluster, body.partitions)
    return state.public()


@router.get("", response_model=CutoverView, **VIEWER)
async def get_cutover(
    project: ProjectName, topic: TopicName, cutovers: CutoversDep
) -> dict[str, Any]:
    """The topic's latest cutover: phase, which producers acknowledged what, and when."""
    return (await cutovers.get(project, topic)).public()


@router.delete("", response_model=CutoverView, **OWNER)
async def abort_cutover(
    project: ProjectName, topic: TopicName, cutovers: CutoversDep
) -> dict[str, Any]:
    """Abort the running cutover before it commits (409 after COMMIT)."""
    return (await cutovers.abort(project, topic)).public()

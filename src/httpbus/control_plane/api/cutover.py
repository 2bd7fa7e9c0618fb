"""``/v1/projects/{project}/topics/{topic}/cutover``: start, read and abort a cutover."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, status
from pydantic import BaseModel, ConfigDict, Field

from httpbus.core.model import MAX_PARTITIONS
from httpbus.core.names import Name

from ..cutover import Cutovers
from .deps import ProjectName, TopicName

router = APIRouter(prefix="/v1/projects/{project}/topics/{topic}/cutover", tags=["cutover"])


def _cutovers(request: Request) -> Cutovers:
    cutovers: Cutovers = request.app.state.cutovers
    return cutovers


CutoversDep = Annotated[Cutovers, Depends(_cutovers)]


class CutoverStart(BaseModel):
    """Where the topic moves: a configured storage cluster and a partition count."""

    model_config = ConfigDict(extra="forbid")

    cluster: Name = Field(description="a configured storage cluster, e.g. pulsar-main")
    partitions: int = Field(ge=1, le=MAX_PARTITIONS, description=f"1 to {MAX_PARTITIONS}")


@router.post("", status_code=status.HTTP_202_ACCEPTED)
async def start_cutover(
    project: ProjectName, topic: TopicName, body: CutoverStart, cutovers: CutoversDep
) -> dict[str, Any]:
    """Begin moving the topic to a fresh segment; 409 while another cutover runs."""
    state = await cutovers.start(project, topic, body.cluster, body.partitions)
    return state.public()


@router.get("")
async def get_cutover(
    project: ProjectName, topic: TopicName, cutovers: CutoversDep
) -> dict[str, Any]:
    """The topic's latest cutover: phase, which producers acknowledged what, and when."""
    return (await cutovers.get(project, topic)).public()


@router.delete("")
async def abort_cutover(
    project: ProjectName, topic: TopicName, cutovers: CutoversDep
) -> dict[str, Any]:
    """Abort the running cutover before it commits (409 after COMMIT)."""
    return (await cutovers.abort(project, topic)).public()

"""A request for consent: an owner of project ``grantee`` asks the owners of ``project`` to
grant topic ``project/topic`` to it (the topic catalog's "Request access", docs/catalog.md).

One record per topic and grantee, kept in the metastore beside the topic: a new request
replaces a decided one, a pending one stands until an owner of the topic's project approves
(which creates the topic grant) or refuses it. Deleting the topic deletes its requests.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from .names import Name

MAX_REASON = 1_000


class RequestState(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REFUSED = "refused"


class GrantRequest(BaseModel):
    """As stored; ``version`` is the metastore node's (compare-and-set on decisions)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    project: Name  # the topic's project
    topic: Name
    grantee: Name  # the project whose subscriptions would read the topic
    reason: str = Field(default="", max_length=MAX_REASON)
    requested_by: str = Field(max_length=200)
    requested_at: datetime
    state: RequestState = RequestState.PENDING
    decided_by: str | None = Field(default=None, max_length=200)
    decided_at: datetime | None = None
    note: str = Field(default="", max_length=MAX_REASON)
    version: int = -1

"""The three batch jobs in one pass over the trail, as ``httpbus audit run`` and
``spark-submit -m spark`` run them."""

from __future__ import annotations

import time

from pydantic import BaseModel, Field
from pyspark.sql import DataFrame, SparkSession

from core.audit import (
    AuditCutover,
    AuditSubscription,
    CutoverCheck,
    HourlyRow,
    Reconciliation,
)

from .cutover import verify_cutovers
from .hourly import hourly_report
from .reconcile import reconcile, subscriptions_frame
from .schema import distinct_events

JOB_COLUMNS = [
    "type",
    "message_id",
    "project",
    "topic",
    "subscription",
    "segment",
    "partition",
    "position",
    "group",
    "at_ms",
    "produced_at_ms",
    "due_at_ms",
    "status",
    "circuit_to",
    "shard",
]
"""Every column the three jobs read (``reconcile.COLUMNS`` among them): the shared frame keeps
only these."""


class AuditJob(BaseModel):
    """What to check: the subscriptions and cutovers (from the metastore), the window of
    accepted messages ``[since_ms, until_ms)``, the time of the check and the horizon."""

    subscriptions: list[AuditSubscription]
    cutovers: list[AuditCutover] = Field(default_factory=list)
    since_ms: int
    until_ms: int
    as_of_ms: int
    horizon_ms: int = Field(gt=0)


class AuditOutput(BaseModel):
    reconciliation: Reconciliation
    hourly: list[HourlyRow]
    cutovers: list[CutoverCheck]
    seconds: float


def run_batch(spark: SparkSession, events: DataFrame, job: AuditJob) -> AuditOutput:
    """Reconciliation, hourly report (over the same window) and cutover verification."""
    t0 = time.monotonic()
    # Deduplicated once for the three jobs, narrowed to the columns they read.
    distinct = distinct_events(events, JOB_COLUMNS).cache()
    try:
        subs = subscriptions_frame(spark, job.subscriptions)
        rec = reconcile(
            distinct,
            subs,
            since_ms=job.since_ms,
            until_ms=job.until_ms,
            as_of_ms=job.as_of_ms,
            horizon_ms=job.horizon_ms,
            dedupe=False,
        )
        hourly = hourly_report(distinct, subs, job.since_ms, job.until_ms, dedupe=False)
        checks = verify_cutovers(distinct, job.cutovers, dedupe=False)
    finally:
        distinct.unpersist()
    return AuditOutput(
        reconciliation=rec, hourly=hourly, cutovers=checks, seconds=time.monotonic() - t0
    )

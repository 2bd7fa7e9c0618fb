"""Per-project quotas on a ``MetaStore``: the quota document, the count guard, the leases.

- ``/projects/{p}/quota`` holds the :class:`~core.quotas.ProjectQuota`. A create of a topic
  or a subscription of ``p`` that is bounded by it adds :func:`count_guard`'s op to its
  transaction: a compare-and-set on the quota node's version (its data unchanged). Two
  concurrent creates both read version *v* and the same count; only one transaction can
  move *v*, the other gets ``VersionConflict``, counts again and finds the last slot taken.
- ``/quota-leases/{p}/{member}`` (ephemeral) holds each producer's
  :class:`~core.quotas.LeaseReport` for ``p``; the producers split the rate quota by them,
  and :meth:`QuotaStore.usage` adds them up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from core.errors import AlreadyExists, NotFound, QuotaExceeded, VersionConflict
from core.quotas import (
    CountQuota,
    LeaseReport,
    ProjectQuota,
    QuotaUsage,
    RateQuota,
    combined_usage,
)

from . import paths
from .ephemeral import put_ephemeral, remove
from .protocol import MetaStore, Op, Update

T = TypeVar("T")
ATTEMPTS = 50  # creates racing for the same project's quota node, before giving up


class QuotaStore:
    def __init__(self, store: MetaStore) -> None:
        self.store = store

    async def get(self, project: str) -> tuple[ProjectQuota, int]:
        """The project's quota and its node's version (-1: none set, no limits)."""
        node = await self.store.get(paths.quota(project))
        if node is None or not node.data:
            return ProjectQuota(), -1 if node is None else node.version
        return ProjectQuota.model_validate_json(node.data), node.version

    async def set(self, project: str, quota: ProjectQuota) -> ProjectQuota:
        """Replace the project's quota (a CAS loop: a racing create only bumps the version).
        The project must exist; lowering a count below today's usage is allowed (further
        creates are refused until the usage is under it again)."""
        if await self.store.get(paths.project(project)) is None:
            raise NotFound(f"project {project!r} does not exist")
        data = quota.model_dump_json().encode()
        for _ in range(ATTEMPTS):
            node = await self.store.get(paths.quota(project))
            try:
                if node is None:
                    await self.store.create(paths.quota(project), data)
                else:
                    await self.store.update(
                        paths.quota(project), data, expected_version=node.version
                    )
                return quota
            except (VersionConflict, AlreadyExists):
                continue
        raise VersionConflict(f"the quota of project {project!r} changed too often; try again")

    async def count(self, project: str, kind: CountQuota) -> int:
        parent = (
            paths.topics(project) if kind is CountQuota.TOPICS else paths.subscriptions(project)
        )
        return len(await self.store.children(parent))

    async def count_guard(self, project: str, kind: CountQuota) -> list[Op]:
        """The ops a create of one ``kind`` in ``project`` adds to its transaction: none
        without a bound, else a CAS on the quota node; ``QuotaExceeded`` when it is full."""
        node = await self.store.get(paths.quota(project))
        if node is None or not node.data:
            return []
        quota = ProjectQuota.model_validate_json(node.data)
        bound: int | None = getattr(quota, kind.value)
        if bound is None:
            return []
        used = await self.count(project, kind)
        if used >= bound:
            raise QuotaExceeded(
                f"project {project} has {used} {kind.noun} and its quota "
                f"({kind.value}) allows {bound}; delete some or ask an admin to raise it",
                details={"quota": kind.value, "project": project, "limit": bound, "used": used},
            )
        return [Update(paths.quota(project), node.data, node.version)]

    async def guarded(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """Run ``attempt`` (which reads, guards and commits) again while it loses a race on
        a version: the next round counts again."""
        for _ in range(ATTEMPTS - 1):
            try:
                return await attempt()
            except VersionConflict:
                await asyncio.sleep(0)  # let the winner's follow-up reads run first
        return await attempt()

    async def usage(self, project: str) -> QuotaUsage:
        """The project's quota and its usage (``NotFound`` if the project does not exist)."""
        if await self.store.get(paths.project(project)) is None:
            raise NotFound(f"project {project!r} does not exist")
        (quota, _), topics, subs, reports = await asyncio.gather(
            self.get(project),
            self.count(project, CountQuota.TOPICS),
            self.count(project, CountQuota.SUBSCRIPTIONS),
            self.reports(project),
        )
        return QuotaUsage(
            quota=quota,
            topics=topics,
            subscriptions=subs,
            messages_per_second=combined_usage(reports, RateQuota.MESSAGES),
            bytes_per_second=combined_usage(reports, RateQuota.BYTES),
            producers=len(reports),
        )

    async def reports(self, project: str) -> dict[str, LeaseReport]:
        """Every live producer's report for ``project``."""
        parent = paths.quota_leases(project)
        names = await self.store.children(parent)
        nodes = await asyncio.gather(*(self.store.get(f"{parent}/{n}") for n in names))
        return {
            name: LeaseReport.model_validate_json(node.data)
            for name, node in zip(names, nodes, strict=True)
            if node is not None and node.data
        }

    async def report(self, project: str, member: str, report: LeaseReport) -> None:
        """Write ``member``'s report (an ephemeral node, gone with the producer's session)."""
        path = paths.quota_lease(project, member)
        await put_ephemeral(self.store, path, report.model_dump_json().encode())

    async def withdraw(self, project: str, member: str) -> None:
        await remove(self.store, paths.quota_lease(project, member))

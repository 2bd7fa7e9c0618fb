"""Where the cutover state lives in the metastore, for the coordinator and the producers.

One document per topic, ``/projects/{p}/topics/{t}/cutover``: the topic's latest cutover
(:class:`~.cutover.Cutover`), updated by compare-and-set only. While a cutover is being
driven, the marker ``/cutovers/active/{p}:{t}`` exists, so a new coordinator finds every
cutover in flight with one read. Producers record their acknowledgements in the same
document (one CAS each, retried on conflict): the coordinator sees them through its watch.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime

from core.errors import AlreadyExists, CutoverInProgress, NotFound, VersionConflict
from metastore import paths
from metastore.documents import TopicDocuments
from metastore.protocol import Check, Create, Delete, MetaStore, Op, Update

from .machine import TERMINAL, Acks, Cutover, Phase, record_ack

_ACK_RETRIES = 50


class CutoverRecords(TopicDocuments[Cutover]):
    """Typed access to the cutover documents on a ``MetaStore``."""

    def __init__(self, store: MetaStore) -> None:
        super().__init__(store, Cutover, paths.cutover)

    async def create(self, state: Cutover, topic_version: int) -> int:
        """Store a new cutover and mark it active, in one transaction checked against the
        topic's version; ``CutoverInProgress`` if one is active."""
        p, t = state.project, state.topic
        current = await self.get(p, t)
        if current is not None and current[0].phase not in TERMINAL:
            raise CutoverInProgress(
                f"topic {p}/{t} is in cutover {current[0].id} ({current[0].phase}); "
                "wait for it to finish or abort it"
            )
        if await self.store.get(paths.active_cutover(p, t)) is not None:
            raise CutoverInProgress(f"topic {p}/{t} still finishes its last cutover; retry soon")
        doc = self.write_op(p, t, state, None if current is None else current[1])
        ops: list[Op] = [
            Check(paths.topic(p, t), topic_version),
            doc,
            Create(paths.active_cutover(p, t), b""),
        ]
        try:
            await self.store.transaction(ops)
        except (AlreadyExists, VersionConflict):
            raise CutoverInProgress(f"topic {p}/{t} changed meanwhile; retry") from None
        return 0 if current is None else current[1] + 1

    def update_op(self, state: Cutover, version: int) -> Create | Update:
        return self.write_op(state.project, state.topic, state, version)

    async def put(self, state: Cutover, version: int) -> int:
        """Replace the document if it is still at ``version``; the new version."""
        return await self.replace(state.project, state.topic, state, version)

    async def active(self) -> list[tuple[str, str]]:
        """``(project, topic)`` of every cutover still driven."""
        names = await self.store.children(paths.ACTIVE_CUTOVERS)
        return [(n.split(":", 1)[0], n.split(":", 1)[1]) for n in names]

    async def finish(self, project: str, topic: str) -> None:
        """Unmark a cutover that needs nothing more."""
        try:
            await self.store.transaction([Delete(paths.active_cutover(project, topic))])
        except NotFound:
            pass

    async def watch(self, project: str, topic: str) -> AsyncIterator[Cutover | None]:
        """The topic's cutover now and after every change."""
        async for node in self.store.watch(paths.cutover(project, topic)):
            yield None if node is None else Cutover.model_validate_json(node.data)

    async def ack(
        self, project: str, topic: str, cutover_id: str, member: str, phase: Phase, now: datetime
    ) -> Cutover | None:
        """Record that ``member`` acknowledged ``phase`` of cutover ``cutover_id``; the
        state written, or None if the cutover moved on (a late answer changes nothing)."""
        for _ in range(_ACK_RETRIES):
            found = await self.get(project, topic)
            if found is None:
                return None
            current, version = found
            if current.id != cutover_id:
                return None
            state = record_ack(current, member, phase, now)
            if state is None:  # already recorded, or late: nothing to write
                return current if current.producers.get(member, Acks()).has(phase) else None
            try:
                await self.put(state, version)
                return state
            except VersionConflict:
                continue
        raise VersionConflict(f"could not record the {phase} ack of {member} on {project}/{topic}")

"""The lock of one unit of assignment (a subscription, or a shard of one): an ephemeral node
only one worker holds, with a token of its own so that it never deletes another's.

A worker runs a unit only while it holds the lock and its session's lease is valid:
:meth:`UnitLock.acquire` waits (on a watch) while another holds it,
:meth:`UnitLock.until_fenced` returns when the lease lapses (a partition, a pause, a stalled
loop, an expired session: metastore/lease.py), :meth:`UnitLock.until_ours_again` then says
whether the same session came back with the lock, and :meth:`UnitLock.release` deletes it
only if it is still this worker's. Example::

    lock = UnitLock(meta, "w-1", paths.unit_lock(key), orphans)
    await lock.acquire()
    try:
        ...  # run the unit until lock.until_fenced() returns
    finally:
        await lock.release()

A held lock is not watched. Its node goes only with its session, which the lease follows
(it lapses at half the session timeout, before the server can expire the session), or by a
delete of this member's own: :meth:`release` (its token) and ``_drop_stale`` (a node of
this member id left by an earlier lock). A member id has one live session at a time: a
join is refused while another session holds it, and a process whose id was taken while its
session was lost is revoked (``SessionLease.revoke``) and takes no lock again. So nobody
else deletes a held lock, and a watch of each one was a request per unit at every start
and every reconnect, one of the two a unit's start could not batch (docs/capacity.md).
Deleting a lock node by hand does not stop its holder: unassign the unit or stop the
member.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

from core.errors import (
    AlreadyExists,
    HttpbusError,
    MetaStoreUnavailable,
    NotFound,
    VersionConflict,
)
from core.tasks import TaskSet
from metastore.protocol import MetaStore, Node

log = logging.getLogger(__name__)

_RELEASE_ATTEMPTS = 30  # of an abandoned lock, ``retry_s`` × 4 apart
_WAIT_ROUNDS = 60  # of ``retry_s``: the longest wait on the watch before trying again
_REREAD_S = 0.2  # between reads of a fenced lock that failed (until_ours_again)


@dataclass(eq=False)
class UnitLock:
    """See the module doc. ``orphans`` runs the releases of locks whose create landed after
    its caller was cancelled."""

    metastore: MetaStore
    member_id: str
    path: str
    orphans: TaskSet
    retry_s: float
    token: bytes = field(init=False)

    def __post_init__(self) -> None:
        self.token = json.dumps({"member": self.member_id, "token": uuid.uuid4().hex}).encode()

    async def acquire(self) -> None:
        """Create the lock's node once this process's lease is valid (never, revoked),
        waiting while another holds it."""
        waited = False
        while True:
            await self.metastore.lease.until_valid()
            create = asyncio.ensure_future(
                self.metastore.create(self.path, self.token, ephemeral=True)
            )
            try:
                await asyncio.shield(create)
                return
            except asyncio.CancelledError:
                # Unassigned while the create was on the wire: it may still succeed, and an
                # ephemeral lock nobody releases blocks the next owner while we live.
                create.add_done_callback(self._orphaned)
                raise
            except MetaStoreUnavailable:
                # No answer in time: the create may have landed all the same. The caller
                # tries again with a new lock, which clears this one if still assigned;
                # if it was unassigned meanwhile, nobody would, and the next owner waited
                # for it as long as we lived (bench/scale.py: hundreds of units at 10^4).
                self.abandon()
                raise
            except AlreadyExists:
                if not waited:
                    log.info("worker %s waits for the lock %s", self.member_id, self.path)
                    waited = True
                await self._until_free()

    async def _until_free(self) -> None:
        """Wait until the lock's node is gone (or was a stale one of ours: deleted), on a
        watch of it. Polling it every ``retry_s`` (a create and a read) was two requests a
        unit twice a second for every unit whose previous owner had not let go yet: at a
        start or a rebalance of thousands of units, most of a member's requests
        (bench/scale.py). ``retry_s`` × ``_WAIT_ROUNDS`` bounds a wait, should a watch be
        missed."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.retry_s * _WAIT_ROUNDS):
                async for node in self.metastore.watch(self.path):
                    if node is None or await self._drop_stale(node):
                        return

    def _orphaned(self, create: asyncio.Future[Any]) -> None:
        if create.cancelled():
            return
        failed = create.exception()
        if failed is None or isinstance(failed, MetaStoreUnavailable):  # it may have landed
            self.abandon()  # patiently: one failed read left it for the worker's lifetime

    def abandon(self) -> None:
        """Release this lock in the background, trying again while the metastore does not
        answer (``_RELEASE_ATTEMPTS``): for a create or a release whose outcome is unknown.
        Only this lock's token is ever deleted, so a later holder's node is never touched."""
        self.orphans.spawn(self._release_patiently())

    async def _release_patiently(self) -> None:
        for _ in range(_RELEASE_ATTEMPTS):
            try:
                await self.release()
                return
            except MetaStoreUnavailable:
                await asyncio.sleep(self.retry_s * 4)
            except HttpbusError as exc:  # a conflict: the node changed, so it is not ours
                log.info("worker %s: lock %s not released: %s", self.member_id, self.path, exc)
                return
        log.warning("worker %s could not release the lock %s", self.member_id, self.path)

    async def release(self) -> None:
        # Only our own lock: after a session loss the node may be another worker's now.
        node = await self.metastore.get(self.path)
        if node is not None and node.data == self.token:
            await self.metastore.delete(self.path, expected_version=node.version)

    async def _drop_stale(self, node: Node) -> bool:
        """Delete the lock ``node`` if an earlier holder in this process left it (its release
        failed while the metastore was away, and the session outlived the outage): nobody
        else may take it while we live, and we no longer act on it. True if it was deleted."""
        if node.data == self.token:
            return False
        try:
            holder = json.loads(node.data).get("member")
        except (ValueError, AttributeError):
            return False
        if holder != self.member_id:
            return False
        with contextlib.suppress(NotFound, VersionConflict):
            await self.metastore.delete(self.path, expected_version=node.version)
        return True

    async def until_fenced(self) -> None:
        """Return when this process may no longer act on the lock: its session's lease
        lapsed (see the module doc). A fenced holder keeps the node: if the same session
        is confirmed again (:meth:`until_ours_again`), it goes on without giving the lock
        up and taking it again."""
        await self.metastore.lease.until_lapsed()
        log.warning("worker %s fenced off the lock %s: its session is not confirmed",
                    self.member_id, self.path)  # fmt: skip

    async def until_ours_again(self) -> bool:
        """After :meth:`until_fenced`: wait until the lease is valid again, then say
        whether the lock is still this holder's (the same session was confirmed) or not
        (the session expired meanwhile and its ephemeral lock went with it). A read that
        fails (the connection dropped again, as between peers of a splitting ensemble) is
        tried again: raising it made the worker take the lock anew and redeliver (a chaos
        run)."""
        while True:
            await self.metastore.lease.until_valid()
            try:
                node = await self.metastore.get(self.path)
            except MetaStoreUnavailable:  # the connection moving again, the lease still
                await asyncio.sleep(_REREAD_S)  # valid: a failed read is not a lost lock
                continue
            return node is not None and node.data == self.token


async def until_node(metastore: MetaStore, path: str, *, present: bool) -> None:
    """Wait until the node at ``path`` exists (``present``) or does not: a plain read
    first, a watch only to wait. A worker starting a thousand units asks this of each one's
    subscription at once, which plain reads answer in a few requests (metastore.turn_batch)
    where watches are a request each, and the runner's own watch of it follows anyway."""
    if ((await metastore.get(path)) is not None) == present:
        return
    async for node in metastore.watch(path):
        if (node is not None) == present:
            return

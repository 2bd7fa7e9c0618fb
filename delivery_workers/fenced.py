"""The worker's sender, fenced by its metastore session: nothing is sent while the session's
lease has lapsed (metastore/lease.py).

A worker cut off from ZooKeeper, or paused past its session timeout, may no longer hold the
locks it runs on; another worker may be taking them. The lock's fence returns on a lapse and
the runners stop (:meth:`~.unit_lock.UnitLock.until_fenced`), but an attempt may reach the
sender first (a resumed process runs its ready tasks before its timers): here it waits,
unsent, until the lease is confirmed again or its runner is cancelled. An attempt paused
after this check (waiting for a connection, connecting) is checked again by the sender
right before it writes (:data:`.sender.SEND_GATE`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.lifecycle import AsyncResource
from core.result import DeliveryResult
from metastore.lease import SessionLease

from .sender import SEND_GATE, BatchDelivery, Delivery, EndpointSender, Unsent

log = logging.getLogger(__name__)


@dataclass
class FencedSender(AsyncResource):
    """``inner`` behind ``lease``; ``inner``'s lifecycle stays its owner's (``start`` and
    ``aclose`` do nothing here). ``held``: attempts that found the lease lapsed."""

    inner: EndpointSender
    lease: SessionLease
    held: int = 0

    async def start(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def send(self, delivery: Delivery | BatchDelivery) -> DeliveryResult:
        while True:
            if not self.lease.valid():
                self.held += 1
                log.warning("%s held unsent: the worker's session is not confirmed",
                            delivery.message_id)  # fmt: skip
                await self.lease.until_valid()
            gate = SEND_GATE.set(self.lease.valid)
            try:
                return await self.inner.send(delivery)
            except Unsent:  # paused between here and the write: nothing left, ask again
                continue
            finally:
                SEND_GATE.reset(gate)

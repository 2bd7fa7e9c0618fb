"""Rotating the JWT signing keys on schedule (setting ``jwt_signing.rotate_every_s``): the
process elected to the role ``signing-keys`` checks every ``interval_s`` whether the key
that signs has signed that long, and if so makes the next one (published now, signing
``publish_lead_s`` later: :mod:`core.signing_keys`). Nothing is made while no key exists
(no subscription asked for JWTs yet)."""

from __future__ import annotations

import asyncio
import logging

from control_plane.leaders.election import LeaderElection, every
from control_plane.services.signing_keys import SigningKeys
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)
ROLE = "signing-keys"


class KeyRotation(LeaderElection):
    """Rotate the signing keys when due, while this process leads the role."""

    def __init__(
        self, metastore: MetaStore, keys: SigningKeys, member_id: str, interval_s: float = 60.0
    ) -> None:
        super().__init__(metastore, ROLE, member_id)
        self.keys = keys
        self.interval_s = interval_s

    async def lead(self, lost: asyncio.Event) -> None:
        await every(lost, self.interval_s, self._rotate, "rotating the JWT signing keys")

    async def _rotate(self) -> None:
        if await self.keys.rotate_if_due():
            log.info("rotated the JWT signing key on schedule")

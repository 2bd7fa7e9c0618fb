"""The JWT signing keys as the control plane keeps them: the first one made when none
exists, rotations (asked, or on schedule by the ``signing-keys`` leader), and the JWKS the
receivers fetch. The rules of publication and signing are :mod:`core.signing_keys`'; this
module only reads and writes the one record (a compare-and-set, retried when another
control plane wrote first)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime
from typing import Any

from core.errors import AlreadyExists, VersionConflict
from core.model import utcnow
from core.signing_keys import JwtSigning, KeySet, new_key
from metastore.catalog import Catalog


class SigningKeys:
    """Read, make and rotate the key set of :mod:`core.signing_keys`."""

    def __init__(
        self, catalog: Catalog, setting: JwtSigning, now: Callable[[], datetime] = utcnow
    ) -> None:
        self.catalog = catalog
        self.setting = setting
        self.now = now

    async def current(self) -> KeySet:
        """The stored key set (with no key if none was ever made)."""
        found = await self.catalog.get_signing_keys()
        return found[0] if found is not None else self.setting.empty()

    async def jwks(self) -> dict[str, Any]:
        """The public keys published now (``/.well-known/jwks.json``)."""
        return (await self.current()).jwks(self.now())

    async def ensure(self) -> KeySet:
        """A key set with a key that signs now: the first key is made (signing at once)
        when there is none; nothing changes otherwise."""
        return await self._change(lambda keys, at: keys.signing(at) is None, None)

    async def rotate(self, lead_s: float | None = None) -> KeySet:
        """A new key, published now, signing ``lead_s`` from now (default: the setting's
        ``publish_lead_s``)."""
        return await self._change(lambda keys, at: True, lead_s)

    async def rotate_if_due(self) -> bool:
        """The scheduled rotation (``rotate_every_s``; 0: never): True if it rotated. No
        key is made while none exists (no subscription asked for JWTs yet)."""
        every = self.setting.rotate_every_s
        if every <= 0:
            return False
        before = await self.current()
        if not before.keys or not before.due(self.now(), every):
            return False
        await self._change(lambda keys, at: keys.due(at, every), None)
        return True

    async def _change(
        self, wanted: Callable[[KeySet, datetime], bool], lead_s: float | None
    ) -> KeySet:
        for _ in range(10):
            found = await self.catalog.get_signing_keys()
            keys, version = found if found is not None else (self.setting.empty(), None)
            at = self.now()
            if not wanted(keys, at):
                return keys
            # The key pair is made off the event loop (RSA 2048 takes a moment).
            key = await asyncio.to_thread(new_key, self.setting.algorithm, at)
            changed = self.setting.timings(keys).rotated(key, at, lead_s)
            try:
                await self.catalog.put_signing_keys(changed, version)
            except (VersionConflict, AlreadyExists):
                continue  # another control plane wrote first: look again
            return changed
        raise VersionConflict("the signing keys keep changing; try again")

"""UI sessions ended before their expiry (logout), shared by every control-plane process.

A session cookie is signed, so it stays valid until its expiry unless the server remembers
that it ended. Logging out records the session's id under ``/ui/revoked-sessions`` in the
metastore (the expiry is in the node's name); every process follows that folder and refuses
the ids it lists, so a copied cookie dies everywhere within a watch round trip. Nodes past
their expiry are deleted by whichever process sees them, since the cookie is dead by then anyway.

Without a metastore (tests, a UI mounted on its own) revocations are kept in this process.

Example::

    revoked = RevokedSessions()
    await revoked.attach(metastore)  # in the lifespan
    await revoked.revoke(session.sid, session.expires)
    assert session.sid in revoked
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

from core.errors import AlreadyExists, HttpbusError
from core.tasks import cancel
from metastore import paths
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)


def _parse(name: str) -> tuple[str, int] | None:
    expires, dash, sid = name.partition("-")
    if not dash or not expires.isdigit() or not sid:
        return None
    return sid, int(expires)


class RevokedSessions:
    """The ids of the sessions that logged out, with their expiry (see the module doc)."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}  # sid -> expiry, epoch seconds
        self._meta: MetaStore | None = None
        self._task: asyncio.Task[None] | None = None

    def __contains__(self, sid: object) -> bool:
        return isinstance(sid, str) and sid in self._ids

    async def attach(self, meta: MetaStore) -> None:
        """Share revocations through ``meta`` and follow the other processes' until
        :meth:`aclose`."""
        self._meta = meta
        self._task = asyncio.create_task(self._follow(meta), name="ui-revoked-sessions")

    async def aclose(self) -> None:
        await cancel(self._task)

    async def revoke(self, sid: str, expires: int) -> None:
        """End session ``sid`` here at once, and everywhere once the metastore has it (a
        metastore that does not answer is logged: the cookie is deleted all the same)."""
        self._ids[sid] = expires
        if self._meta is None:
            return
        try:
            await self._meta.create(paths.revoked_session(expires, sid), b"")
        except AlreadyExists:
            pass
        except HttpbusError as exc:
            log.warning("logout of session %s… is known to this process only: %s", sid[:6], exc)

    async def _follow(self, meta: MetaStore) -> None:
        while True:
            try:
                async for names in meta.watch_children(paths.REVOKED_SESSIONS):
                    await self._seen(meta, names)
                return
            except HttpbusError as exc:  # a failed round must not end the following
                log.warning("following revoked UI sessions: %s", exc)
                await asyncio.sleep(1.0)

    async def _seen(self, meta: MetaStore, names: list[str]) -> None:
        now = int(time.time())
        for name in names:
            parsed = _parse(name)
            if parsed is None:
                continue
            sid, expires = parsed
            if expires >= now:
                self._ids[sid] = expires
                continue
            with contextlib.suppress(HttpbusError):  # gone already, or retried next round
                await meta.delete(f"{paths.REVOKED_SESSIONS}/{name}")
        self._ids = {sid: exp for sid, exp in self._ids.items() if exp >= now}

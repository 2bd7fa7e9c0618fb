"""What a delivery adds to authenticate to its endpoint (subscription ``auth``,
:mod:`core.endpoint_auth`): the worker's side.

- ``jwt``: :class:`JwtSigner` signs a token per delivery with the key that signs now
  (:meth:`core.signing_keys.KeySet.signing`). It follows the key set in the metastore with a
  watch, so a rotation reaches every worker without a restart, and keeps each key's loaded
  private key object (parsed once per key, not per delivery).
- ``oauth2_client_credentials``: :class:`~.token_cache.TokenCache`.
- ``mtls``: :func:`tls_context`, an ``ssl.SSLContext`` per client identity; the sender keeps
  a connection pool per context (:class:`~.http_sender.HttpSender`).

Subscriptions with ``auth`` ``none`` never reach this module: the sender checks the type
once per delivery and goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import ssl
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from core.endpoint_auth import JwtAuth, MtlsAuth
from core.errors import HttpbusError
from core.model import Subscription
from core.signing_keys import KeySet, SigningKey
from metastore import paths
from metastore.protocol import MetaStore

log = logging.getLogger(__name__)


class NoSigningKey(Exception):
    """No key signs now (none was made yet, or the metastore was not read yet)."""


class JwtSigner:
    """Delivery JWTs (module doc). :meth:`start` reads the key set and follows it."""

    def __init__(self, metastore: MetaStore | None, clock: Callable[[], float] = time.time):
        self.metastore = metastore
        self.keys: KeySet | None = None
        self._clock = clock
        self._loaded: dict[str, Any] = {}  # kid -> private key object
        self._follow: asyncio.Task[None] | None = None
        self.signed = 0

    async def start(self) -> None:
        if self.metastore is not None and self._follow is None:
            try:
                await self.refresh()
            except HttpbusError as exc:  # the watch below reads them once it can
                log.warning("reading the JWT signing keys: %s", exc)
            self._follow = asyncio.create_task(self._follow_keys(self.metastore))

    async def aclose(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
            self._follow = None

    async def refresh(self) -> None:
        """Read the key set now (a missed watch event costs one delivery, not a stream)."""
        if self.metastore is None:
            return
        node = await self.metastore.get(paths.SIGNING_KEYS)
        self._set(None if node is None else node.data)

    async def _follow_keys(self, metastore: MetaStore) -> None:
        while True:
            try:
                async for node in metastore.watch(paths.SIGNING_KEYS):
                    self._set(None if node is None else node.data)
            except HttpbusError as exc:  # the session came back: watch again
                log.warning("following the JWT signing keys: %s", exc)
                await asyncio.sleep(1.0)

    def _set(self, data: bytes | None) -> None:
        self.keys = None if data is None else KeySet.model_validate_json(data)
        known = {k.kid for k in self.keys.keys} if self.keys else set()
        for kid in [k for k in self._loaded if k not in known]:
            del self._loaded[kid]

    def _private(self, key: SigningKey) -> Any:
        found = self._loaded.get(key.kid)
        if found is None:
            found = load_pem_private_key(key.private_pem.encode(), password=None)
            self._loaded[key.kid] = found
        return found

    def sign(self, sub: Subscription, auth: JwtAuth, url: str) -> str:
        """The JWT of one delivery of ``sub`` to ``url``; :class:`NoSigningKey` if none
        signs now."""
        now = self._clock()
        keys = self.keys
        key = keys.signing(datetime.fromtimestamp(now, UTC)) if keys is not None else None
        if keys is None or key is None:
            raise NoSigningKey("no JWT signing key signs yet: the control plane makes one")
        issued = int(now)
        claims = {
            "iss": keys.issuer,
            "aud": auth.audience or url,
            "sub": f"{sub.project}/{sub.name}",
            "iat": issued,
            "exp": issued + keys.token_ttl_s,
            "jti": uuid.uuid4().hex,
        }
        self.signed += 1
        return jwt.encode(claims, self._private(key), algorithm=key.alg, headers={"kid": key.kid})


def tls_identity(auth: MtlsAuth) -> str:
    """A digest naming what :func:`tls_context` makes of ``auth`` (one pool per identity)."""
    parts = (auth.client_cert or "", auth.client_key or "", auth.ca or "")
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def tls_context(auth: MtlsAuth, alpn: list[str] | None = None) -> ssl.SSLContext:
    """A client context presenting ``auth``'s certificate (if any) and verifying the
    endpoint against ``auth.ca`` (else the system's trust store). ``ssl`` loads a key pair
    only from files: they are written to a private temporary folder and removed at once."""
    context = ssl.create_default_context(cadata=auth.ca or None)
    if auth.client_cert and auth.client_key:
        with tempfile.TemporaryDirectory(prefix="httpbus-mtls-") as folder:
            cert, key = os.path.join(folder, "cert.pem"), os.path.join(folder, "key.pem")
            for path, text in ((cert, auth.client_cert), (key, auth.client_key)):
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(descriptor, "w") as out:
                    out.write(text)
            context.load_cert_chain(cert, key)
    if alpn:
        context.set_alpn_protocols(alpn)
    return context

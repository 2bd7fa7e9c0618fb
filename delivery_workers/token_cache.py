"""OAuth 2.0 access tokens of subscriptions with ``auth`` ``oauth2_client_credentials``,
cached per client.

A token is fetched once per client (token URL, client id and secret, scope, audience: a
changed secret is another client, so an update of the subscription fetches anew) and shared
by every delivery of every subscription that names that client. It is renewed when
:data:`RENEW_AT` of its ``expires_in`` has passed, before it expires, so a stream of
deliveries never carries an expired token; while it renews, concurrent deliveries wait for
the one fetch (single flight). A token the endpoint refused (401) is dropped with
:meth:`TokenCache.refused` and the next call fetches a new one, once per refused token.

If a renewal fails while the cached token is still valid, the cached token is used (an
authorization server's hiccup does not stop deliveries); otherwise :class:`TokenError`.
The fetch itself is injected (:data:`Fetch`): the worker's sender posts the token request
through its own pool, under the endpoint policy (:meth:`~.http_sender.HttpSender.fetch_token`).

Example::

    cache = TokenCache(sender.fetch_token)
    token = await cache.token(sub.auth)        # "eyJ…", fetched or cached
    ...
    cache.refused(sub.auth, token)             # the endpoint answered 401
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from core.endpoint_auth import OAuth2ClientCredentials

RENEW_AT = 0.8
DEFAULT_EXPIRES_IN_S = 3_600.0  # RFC 6749 5.1: expires_in is only recommended
MAX_CLIENTS = 10_000


class TokenError(Exception):
    """No token could be had: the message says what the authorization server did."""


@dataclass(frozen=True, slots=True)
class Granted:
    """A token endpoint's answer: the token and its ``expires_in`` (None if absent)."""

    access_token: str
    expires_in: float | None


Fetch = Callable[[OAuth2ClientCredentials], Awaitable[Granted]]
ClientKey = tuple[str, str, str, str | None, str | None]


@dataclass(slots=True)
class _Cached:
    value: str
    renew_at: float
    expires_at: float


def client_key(auth: OAuth2ClientCredentials) -> ClientKey:
    return (str(auth.token_url), auth.client_id, auth.client_secret, auth.scope, auth.audience)


class TokenCache:
    """Access tokens by client (module doc); ``clock`` gives seconds (monotonic is fine)."""

    def __init__(self, fetch: Fetch, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self._clock = clock
        self._tokens: dict[ClientKey, _Cached] = {}
        self._fetching: dict[ClientKey, asyncio.Future[str]] = {}
        self.fetches = 0  # token requests made (for the tests and the status)

    async def token(self, auth: OAuth2ClientCredentials) -> str:
        """A token for ``auth``'s client: cached, or fetched when there is none, it is due
        for renewal, or it was refused."""
        key = client_key(auth)
        cached = self._tokens.get(key)
        if cached is not None and self._clock() < cached.renew_at:
            return cached.value
        running = self._fetching.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._fetching[key] = future
        try:
            value = await self._renew(key, auth, cached)
        except BaseException as exc:
            # Those waiting on this fetch fail with a TokenError (retryable), never with the
            # cancellation of the attempt that ran it.
            shared = exc if isinstance(exc, TokenError) else TokenError(f"no token: {exc!r}")
            future.set_exception(shared)
            future.exception()  # retrieved: a fetch nobody else waited on must not warn
            raise
        else:
            future.set_result(value)
            return value
        finally:
            del self._fetching[key]

    async def _renew(
        self, key: ClientKey, auth: OAuth2ClientCredentials, cached: _Cached | None
    ) -> str:
        self.fetches += 1
        try:
            granted = await self._fetch(auth)
        except TokenError:
            if cached is not None and self._clock() < cached.expires_at:
                return cached.value  # renewal failed early: the token still holds
            raise
        lifetime = granted.expires_in if granted.expires_in else DEFAULT_EXPIRES_IN_S
        now = self._clock()
        if len(self._tokens) >= MAX_CLIENTS and key not in self._tokens:
            self._tokens.pop(next(iter(self._tokens)))  # the oldest client
        self._tokens[key] = _Cached(granted.access_token, now + RENEW_AT * lifetime, now + lifetime)
        return granted.access_token

    def refused(self, auth: OAuth2ClientCredentials, value: str) -> None:
        """The endpoint answered 401 to ``value``: drop it (if it is still the cached one),
        so the next :meth:`token` fetches a new one."""
        key = client_key(auth)
        cached = self._tokens.get(key)
        if cached is not None and cached.value == value:
            del self._tokens[key]

"""The worker's HTTP sender: a lean HTTP/1.1 :class:`~delivery_workers.sender.EndpointSender`.

aiohttp spends about half of a worker's time on a small delivery in its general machinery
(request and response objects, payload registry, multidict headers, stream readers, a timeout
handle per request). :class:`HttpSender` does only what a delivery needs: take an idle
keep-alive connection of the endpoint's origin (or open one), write the request as one
``bytes``, and await one future that the httptools callbacks resolve (see :mod:`.http1`).
The attempt's deadline is one timer on the loop. It sends the same request
(:func:`.sender.build_request`) and classifies the same way (:class:`core.result.DeliveryResult`)
as the aiohttp and httpx senders that ``bench/senders.py`` keeps as comparisons; the module
doc of :mod:`.http1` lists how each failure is reported. HTTP/1.1, and with ``http2`` on,
HTTP/2 to HTTPS endpoints that select it through ALPN (:mod:`.http2`), never otherwise.

A subscription with ``auth`` (:mod:`core.endpoint_auth`) gets its ``Authorization`` from
:mod:`.endpoint_auth` (a JWT per delivery) or :mod:`.token_cache` (an OAuth 2.0 token, fetched
through this sender's pool, so the token URL passes the endpoint policy at connect as an
endpoint does), and with ``mtls`` its own pool, whose TLS context presents the client
certificate. Subscriptions without auth pay one comparison per delivery.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import socket
import ssl
import time
from collections import deque
from collections.abc import Callable
from urllib.parse import quote, urlencode

from core.endpoint_auth import JwtAuth, MtlsAuth, OAuth2ClientCredentials
from core.endpoint_policy import EndpointPolicy
from core.lifecycle import AsyncResource
from core.model import MAX_TIMEOUT_MS
from core.result import DeliveryResult, ErrorKind

from .answer_limits import AnswerLimits, ConnectTimeout, InvalidAnswer, QuietLog
from .endpoint_auth import JwtSigner, NoSigningKey, tls_context, tls_identity
from .http1 import (
    Answer,
    Connection,
    ConnectionLost,
    InvalidRequest,
    Origin,
    encode_request,
    parse_origin,
)
from .http2 import ALPN, H2Connection, Negotiating
from .sender import (
    SEND_GATE,
    BatchDelivery,
    Delivery,
    OutgoingRequest,
    Unsent,
    build_batch_request,
    build_request,
)
from .settings import WorkerSettings
from .token_cache import Granted, TokenCache, TokenError

_OriginKey = tuple[str, str, int]
AnyConnection = Connection | H2Connection
log = logging.getLogger(__name__)


class EndpointRefused(Exception):
    """The endpoint policy refuses the address the endpoint's host resolved to."""


def _expire(waiter: asyncio.Future[Answer]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError())


class ConnectionPool:
    """Keep-alive connections, by origin, at most ``max_connections`` open in all: HTTP/1.1
    ones carry one request at a time; an HTTP/2 one (``http2`` on, selected through ALPN) is
    shared by up to the endpoint's stream limit and counts once.

    A connection idle longer than ``keepalive_expiry`` seconds, or one the endpoint closed,
    is never handed out. At the limit, an idle connection of another origin is closed to make
    room; with none idle, :meth:`acquire` waits (first come, first served) for one to be
    released. The most recently used idle connection goes first, so a burst's extra
    connections age out instead of being kept warm by round-robin."""

    def __init__(
        self,
        max_connections: int,
        keepalive_expiry: float,
        ssl_context: ssl.SSLContext | None,
        policy: EndpointPolicy | None = None,
        http2: bool = False,
        limits: AnswerLimits | None = None,
    ) -> None:
        self.max_connections = max_connections
        self.policy = policy
        self.limits = limits or AnswerLimits()
        self.keepalive_expiry = keepalive_expiry
        self.http2 = http2
        self._ssl = ssl_context
        if http2 and ssl_context is not None:
            ssl_context.set_alpn_protocols(ALPN)
        self._idle: dict[_OriginKey, deque[Connection]] = {}
        # HTTP/2 connections by origin, shared by many requests at once (``http2``).
        self._multiplexed: dict[_OriginKey, list[H2Connection]] = {}
        self._opening: dict[_OriginKey, asyncio.Future[None]] = {}  # maybe-h2 connects
        self._http1_only: set[_OriginKey] = set()  # HTTPS origins that did not select h2
        self._open = 0  # idle or in use
        self._every: set[AnyConnection] = set()  # idle or in use, until closed
        self._closed = False
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def open_connections(self) -> int:
        """Connections counted against the limit (idle ones the endpoint closed included,
        until they are next looked at)."""
        return self._open

    def take_idle(self, key: _OriginKey, now: float) -> AnyConnection | None:
        """A connection to ``key`` that can take a request now, without waiting (an HTTP/2
        one with a free stream, or a live idle HTTP/1.1 one); None if there is none."""
        shared = self._multiplexed.get(key)
        if shared:
            found = self._take_shared(shared, now)
            if found is not None:
                return found
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            if conn.closed or now - conn.idle_since > self.keepalive_expiry:
                self._discard(conn)
                continue
            conn.reused = True
            return conn
        return None

    def _take_shared(self, shared: list[H2Connection], now: float) -> H2Connection | None:
        for conn in list(shared):
            idle = conn.in_flight == 0
            expired = idle and now - conn.idle_since > self.keepalive_expiry
            if conn.closed or (idle and (expired or not conn.reusable)):
                self._discard(conn)
            elif conn.available:
                conn.reused = True
                return conn
        return None

    async def acquire(self, origin: Origin) -> AnyConnection:
        """A connection to ``origin``: idle, or new once the limit allows (the caller bounds
        the wait). While a connection that may turn out HTTP/2 is being opened to an origin,
        other callers wait for it instead of opening their own (it may carry them all)."""
        loop = asyncio.get_running_loop()
        key = origin.key
        while True:
            if self._closed:
                raise ConnectionLost("the sender is closed", answered=False)
            conn = self.take_idle(key, loop.time())
            if conn is not None:
                return conn
            opening = self._opening.get(key)
            if opening is not None:
                await asyncio.shield(opening)
                continue
            if self._open < self.max_connections or self._close_an_idle(loop.time()):
                break
            await self._wait(loop)
        self._open += 1
        may_be_h2 = self.http2 and origin.scheme == "https" and key not in self._http1_only
        if may_be_h2:
            self._opening[key] = loop.create_future()
        try:
            conn = await self._connect(loop, origin)
        except BaseException:
            self._open -= 1
            self._wake()
            raise
        finally:
            if may_be_h2:
                self._opening.pop(key).set_result(None)
        if self._closed:  # closed while this one connected: :meth:`close` did not see it
            conn.close()
            await asyncio.wait([conn.gone], timeout=1.0)  # its socket closes before the loop
            raise ConnectionLost("the sender is closed", answered=False)
        self._every.add(conn)
        if isinstance(conn, H2Connection):
            self._multiplexed.setdefault(key, []).append(conn)
        elif may_be_h2:
            self._http1_only.add(key)  # it did not select h2: no more waiting on it
        return conn

    def release(self, conn: AnyConnection) -> None:
        """Give ``conn`` back after an exchange: kept if it can carry another, else closed.
        An HTTP/2 connection stays shared until it is closed (or, going away, idle)."""
        if isinstance(conn, H2Connection):
            if conn.closed:
                self._discard(conn)
        elif conn.reusable and not self._closed:
            conn.idle_since = asyncio.get_running_loop().time()
            self._idle.setdefault(conn.origin_key, deque()).append(conn)
        else:
            self._discard(conn)
        self._wake()

    async def close(self, grace_s: float = 1.0) -> None:
        """Close every connection, idle or in use (an exchange on one fails with
        :class:`ConnectionLost`), and wait up to ``grace_s`` for their sockets to close: a
        loop that stops right after must not drop a socket still open."""
        self._closed = True
        self._idle.clear()
        self._multiplexed.clear()
        every, self._every = self._every, set()
        for conn in every:
            conn.close()
        self._open = 0
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ConnectionLost("the sender is closed", answered=False))
        if every:
            await asyncio.wait([conn.gone for conn in every], timeout=grace_s)

    async def _connect(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> AnyConnection:
        """A new connection (resolved, checked, connected, TLS negotiated) within the
        limits' ``connect_timeout_s``."""
        seconds = self.limits.connect_timeout_s
        try:
            async with asyncio.timeout(seconds):
                return await self._open_connection(loop, origin)
        except TimeoutError:
            raise ConnectTimeout(f"ConnectTimeout after {seconds:g} s") from None

    async def _open_connection(
        self, loop: asyncio.AbstractEventLoop, origin: Origin
    ) -> AnyConnection:
        key, limits = origin.key, self.limits
        host = await self._checked_address(loop, origin)
        if origin.scheme == "https":
            if self._ssl is None:
                self._ssl = ssl.create_default_context()
                if self.http2:
                    self._ssl.set_alpn_protocols(ALPN)
            _, chooser = await loop.create_connection(
                lambda: Negotiating(key, limits),
                host,
                origin.port,
                ssl=self._ssl,
                server_hostname=origin.host,
            )
            assert chooser.chosen is not None, "connection_made picks the protocol"
            return chooser.chosen
        else:
            _, conn = await loop.create_connection(
                lambda: Connection(key, limits), host, origin.port
            )
        return conn

    async def _checked_address(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> str:
        """The address to connect to: ``origin.host`` resolved, every address it resolves to
        checked against the endpoint policy (a name that points inside is refused however it
        was registered); without a policy, the host as it is."""
        if self.policy is None:
            return origin.host
        infos = await loop.getaddrinfo(origin.host, origin.port, type=socket.SOCK_STREAM)
        addresses = [str(info[4][0]) for info in infos]
        for address in addresses:
            problem = self.policy.address_problem(origin.host, address)
            if problem is not None:
                raise EndpointRefused(problem)
        if not addresses:
            raise OSError(f"{origin.host} resolved to no address")
        return addresses[0]

    async def _wait(self, loop: asyncio.AbstractEventLoop) -> None:
        waiter: asyncio.Future[None] = loop.create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self._wake()  # woken and cancelled at once: pass the turn on
            else:
                waiter.cancel()
            raise

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def _close_an_idle(self, now: float) -> bool:
        """Close the longest idle connection of any origin; False if none is idle."""
        oldest: deque[Connection] | None = None
        for idle in self._idle.values():
            if idle and (oldest is None or idle[0].idle_since < oldest[0].idle_since):
                oldest = idle
        if oldest is None:
            return False
        self._discard(oldest.popleft())
        return True

    def _discard(self, conn: AnyConnection) -> None:
        conn.close()
        if isinstance(conn, H2Connection):
            shared = self._multiplexed.get(conn.origin_key, [])
            if conn in shared:
                shared.remove(conn)
        if conn in self._every:
            self._every.discard(conn)
            self._open -= 1


class HttpSender(AsyncResource):
    """An :class:`EndpointSender` on a :class:`ConnectionPool`: at most ``max_connections``
    open at once (waiting for one counts in an attempt's timeout, so size it above the
    worker's total in-flight limit), idle ones kept ``keepalive_expiry`` seconds. HTTPS
    endpoints are verified with ``ssl_context`` (default: the system's trust store). With a
    ``policy`` (:mod:`core.endpoint_policy`) every address an endpoint resolves to is checked
    before connecting; a refused one fails the delivery to the DLQ. What an endpoint may
    answer, and how long each phase may take, is bounded by ``limits``
    (:mod:`.answer_limits`). ``signer`` signs the JWTs of subscriptions with ``auth`` ``jwt``
    (without one, such deliveries fail, retryable)."""

    def __init__(
        self,
        *,
        max_connections: int = 1000,
        keepalive_expiry: float = 5.0,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.time,
        policy: EndpointPolicy | None = None,
        http2: bool = False,
        limits: AnswerLimits | None = None,
        signer: JwtSigner | None = None,
    ) -> None:
        self.pool = ConnectionPool(
            max_connections, keepalive_expiry, ssl_context, policy, http2, limits
        )
        self._clock = clock
        self.quiet_log = QuietLog(log)
        self.signer = signer or JwtSigner(None)
        self.tokens = TokenCache(self.fetch_token)
        # One pool per mTLS client identity: a connection that presented one subscription's
        # certificate never carries another's delivery.
        self._tls_pools: dict[str, ConnectionPool] = {}
        self._tls_used: dict[str, float] = {}  # identity -> when a delivery last took it
        self._closing: set[asyncio.Task[None]] = set()
        self._pool_args = (max_connections, keepalive_expiry, policy, http2, limits)

    async def start(self) -> None:
        """Connections are made on first use and kept alive; the JWT signer reads its keys."""
        await self.signer.start()

    async def aclose(self) -> None:
        await self.signer.aclose()
        for pool in self._tls_pools.values():
            await pool.close()
        if self._closing:
            await asyncio.wait(self._closing)
        await self.pool.close()

    async def send(self, delivery: Delivery | BatchDelivery) -> DeliveryResult:
        """One attempt; every failure of the endpoint or the network is a result."""
        try:
            if type(delivery) is Delivery:
                out = build_request(delivery, int(self._clock()))
            else:
                assert isinstance(delivery, BatchDelivery)
                out = build_batch_request(delivery, int(self._clock()))
        except ValueError as exc:
            return DeliveryResult.invalid(f"cannot build the request: {exc}")
        auth = delivery.subscription.auth
        if auth.type == "none":  # the hot path: nothing more
            return await self._send(delivery, out, self.pool)
        pool, token = self.pool, None
        try:
            if isinstance(auth, MtlsAuth):
                pool = self._tls_pool(auth)
            elif isinstance(auth, JwtAuth):
                out = _bearer(out, self.signer.sign(delivery.subscription, auth, out.url))
            elif isinstance(auth, OAuth2ClientCredentials):
                token = await self.tokens.token(auth)
                out = _bearer(out, token)
        except (NoSigningKey, TokenError) as exc:
            return DeliveryResult.failure(ErrorKind.UNEXPECTED, f"endpoint auth: {exc}")
        except (ssl.SSLError, OSError) as exc:
            return DeliveryResult.invalid(f"endpoint auth: the mtls settings do not load: {exc}")
        result = await self._send(delivery, out, pool)
        if result.status == 401 and token is not None:
            assert isinstance(auth, OAuth2ClientCredentials)
            # The endpoint refused the token (revoked, or the secret changed): once, at once,
            # with a new one.
            self.tokens.refused(auth, token)
            try:
                fresh = await self.tokens.token(auth)
            except TokenError as exc:
                return DeliveryResult.failure(ErrorKind.UNEXPECTED, f"endpoint auth: {exc}")
            result = await self._send(delivery, _bearer(out, fresh), pool)
        return result

    def _tls_pool(self, auth: MtlsAuth) -> ConnectionPool:
        identity = tls_identity(auth)
        now = time.monotonic()
        pool = self._tls_pools.get(identity)
        if pool is None:
            self._sweep_tls_pools(now)
            most, keepalive, policy, http2, limits = self._pool_args
            context = tls_context(auth, ALPN if http2 else None)
            pool = ConnectionPool(most, keepalive, context, policy, http2, limits)
            self._tls_pools[identity] = pool
        self._tls_used[identity] = now
        return pool

    def _sweep_tls_pools(self, now: float) -> None:
        """Close the pools of client identities unused for longer than any attempt may
        last (a rotated certificate's, a deleted subscription's): none has a request on."""
        idle_s = MAX_TIMEOUT_MS / 1000 + 60
        for identity in [i for i, at in self._tls_used.items() if now - at > idle_s]:
            del self._tls_used[identity]
            closing = asyncio.get_running_loop().create_task(self._tls_pools.pop(identity).close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def _send(
        self, delivery: Delivery | BatchDelivery, out: OutgoingRequest, pool: ConnectionPool
    ) -> DeliveryResult:
        try:
            origin = parse_origin(out.url)
            data = encode_request(out, origin)
        except InvalidRequest as exc:
            return DeliveryResult.invalid(f"invalid request: {exc}")
        timeout_s = delivery.subscription.endpoint.timeout_ms / 1000
        started = time.perf_counter()
        try:
            answer = await self._exchange(origin, out, data, timeout_s, pool)
        except InvalidRequest as exc:  # a header HTTP/2 cannot carry: nothing was sent
            return DeliveryResult.invalid(f"invalid request: {exc}")
        except Unsent:
            raise
        except EndpointRefused as exc:  # not retried: only a policy change lets it through
            return DeliveryResult.invalid(f"endpoint refused: {exc}")
        except InvalidAnswer as exc:
            error = f"invalid response: {exc}"
            self._tell(origin, error)
            latency_s = time.perf_counter() - started
            return DeliveryResult.failure(ErrorKind.INVALID_RESPONSE, error, latency_s)
        except Exception as exc:
            if isinstance(exc, ssl.SSLError):
                self._tell(origin, f"TLS error: {exc}")
            return DeliveryResult.from_exception(exc, time.perf_counter() - started)
        return DeliveryResult.from_response(
            answer.status,
            answer.headers,
            time.perf_counter() - started,
            body=answer.body,
            now=self._clock(),
            batch=type(delivery) is not Delivery,
        )

    async def fetch_token(self, auth: OAuth2ClientCredentials) -> Granted:
        """An access token from ``auth.token_url`` (RFC 6749 4.4, the client authenticated
        with HTTP Basic), through this sender's pool: the endpoint policy and the answer
        limits apply as to a delivery. :class:`TokenError` saying what went wrong."""
        form = {"grant_type": "client_credentials"}
        if auth.scope:
            form["scope"] = auth.scope
        if auth.audience:
            form["audience"] = auth.audience
        body = urlencode(form).encode()
        basic = base64.b64encode(
            f"{quote(auth.client_id, safe='')}:{quote(auth.client_secret, safe='')}".encode()
        ).decode()
        headers = (
            ("User-Agent", "httpbus"),
            ("Accept", "application/json"),
            ("Accept-Encoding", "identity"),
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Authorization", f"Basic {basic}"),
        )
        url = str(auth.token_url)
        out = OutgoingRequest("POST", url, headers, body)
        try:
            origin = parse_origin(url)
            answer = await self._exchange(
                origin, out, encode_request(out, origin), TOKEN_TIMEOUT_S, self.pool
            )
        except Unsent:
            raise
        except EndpointRefused as exc:
            raise TokenError(f"token URL refused: {exc}") from None
        except Exception as exc:  # every failure of the token server is a TokenError
            why = f"{type(exc).__name__}: {exc}"
            raise TokenError(f"token request to {url} failed: {why}") from None
        return _granted(url, answer)

    def _tell(self, origin: Origin, error: str) -> None:
        """One line per endpoint per minute for an answer it should not have given."""
        where = f"{origin.scheme}://{origin.host_header}"
        self.quiet_log.warning(origin.key, "endpoint %s: %s (logged once a minute)", where, error)

    async def _exchange(
        self,
        origin: Origin,
        out: OutgoingRequest,
        data: bytes,
        timeout_s: float,
        pool: ConnectionPool,
    ) -> Answer:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            conn = pool.take_idle(origin.key, loop.time())
            if conn is None:  # the slow path: wait for the limit, or connect
                async with asyncio.timeout_at(deadline):
                    conn = await pool.acquire(origin)
            gate = SEND_GATE.get()
            if gate is not None and not gate():  # after the last await: see SEND_GATE
                pool.release(conn)
                raise Unsent
            waiter = (
                conn.request(out, origin) if isinstance(conn, H2Connection) else conn.request(data)
            )
            timer = loop.call_at(deadline, _expire, waiter)
            try:
                return await waiter
            except ConnectionLost as exc:
                # A kept-alive connection the endpoint closed as the request went out: send
                # it again on another one. A new connection's failure is the endpoint's.
                if exc.answered or not conn.reused:
                    raise
            finally:
                timer.cancel()
                pool.release(conn)


TOKEN_TIMEOUT_S = 10.0
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750 b64token: safe in a header


def _bearer(out: OutgoingRequest, token: str) -> OutgoingRequest:
    """``out`` with ``Authorization: Bearer <token>`` instead of any static one."""
    headers = tuple(h for h in out.headers if h[0].lower() != "authorization")
    return out._replace(headers=(*headers, ("Authorization", f"Bearer {token}")))


def _granted(url: str, answer: Answer) -> Granted:
    """The token of a token endpoint's answer; :class:`TokenError` naming what is wrong."""
    if not 200 <= answer.status < 300:
        start = answer.body[:200].decode("utf-8", "replace")
        raise TokenError(f"token URL {url} answered {answer.status}: {start}")
    try:
        found = json.loads(answer.body)
    except ValueError:
        raise TokenError(f"token URL {url} answered no JSON") from None
    token = found.get("access_token") if isinstance(found, dict) else None
    if not isinstance(token, str) or _TOKEN.fullmatch(token) is None:
        raise TokenError(f"token URL {url} answered no access_token")
    expires = found.get("expires_in")
    seconds = float(expires) if isinstance(expires, int | float) and expires > 0 else None
    return Granted(token, seconds)


def make_sender(settings: WorkerSettings, signer: JwtSigner | None = None) -> HttpSender:
    """The worker's sender, unstarted, with its pool limit (and ``signer``: the JWT signer
    following the metastore's keys)."""
    return HttpSender(
        max_connections=settings.max_connections,
        policy=settings.endpoint_policy,
        http2=settings.http2,
        limits=settings.answer_limits,
        signer=signer,
    )

"""The OAuth 2.0 token cache (delivery_workers.token_cache) and the sender's use of it: a
token renewed at 80 % of its lifetime, one fetch for many callers, a renewal failure covered
by a token still valid, a 401 answered by one retry with a new token; the token request
itself against a token server double (client credentials in HTTP Basic, the endpoint policy);
and the sender's connection pools of mTLS identities."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core.endpoint_auth import MtlsAuth, OAuth2ClientCredentials
from core.endpoint_policy import EndpointPolicy
from core.model import MAX_TIMEOUT_MS, Subscription
from delivery_workers.http_sender import HttpSender
from delivery_workers.token_cache import Granted, TokenCache, TokenError
from tests.support.auth_doubles import (
    AsgiReceiver,
    Issuance,
    TestCA,
    serve_asgi,
    serve_receiver,
    serve_token_server,
)
from tests.support.clock import ManualClock
from tests.support.senders import delivery_to
from tests.support.until import until


def _auth(secret: str = "s3cret", url: str = "http://127.0.0.1:9/token") -> OAuth2ClientCredentials:
    return OAuth2ClientCredentials(
        type="oauth2_client_credentials", token_url=url, client_id="httpbus", client_secret=secret
    )


class Issuer:
    """A fetch that hands out tok-0, tok-1… valid ``expires_in`` each, or fails."""

    def __init__(self, expires_in: float | None = 100.0) -> None:
        self.expires_in = expires_in
        self.count = 0
        self.failing = False
        self.gate: asyncio.Event | None = None

    async def __call__(self, auth: OAuth2ClientCredentials) -> Granted:
        if self.gate is not None:
            await self.gate.wait()
        if self.failing:
            raise TokenError("token URL answered 503")
        self.count += 1
        return Granted(f"tok-{self.count - 1}", self.expires_in)


async def test_a_token_is_cached_until_80_percent_of_its_lifetime_then_renewed() -> None:
    clock, issuer = ManualClock(1_000.0), Issuer(expires_in=100)
    cache = TokenCache(issuer, clock)
    assert await cache.token(_auth()) == "tok-0"
    clock.now += 79.9
    assert await cache.token(_auth()) == "tok-0"
    clock.now += 0.1  # 80 s of 100: renewed before it expires
    assert await cache.token(_auth()) == "tok-1"
    assert issuer.count == 2


async def test_no_expires_in_means_an_hour() -> None:
    clock, issuer = ManualClock(1_000.0), Issuer(expires_in=None)
    cache = TokenCache(issuer, clock)
    await cache.token(_auth())
    clock.now += 0.8 * 3_600 - 1
    assert await cache.token(_auth()) == "tok-0"


async def test_concurrent_callers_share_one_fetch() -> None:
    issuer = Issuer()
    issuer.gate = asyncio.Event()
    cache = TokenCache(issuer, ManualClock(1_000.0))
    waiting = [asyncio.create_task(cache.token(_auth())) for _ in range(20)]
    await asyncio.sleep(0)  # proves the twenty wait on one fetch, not on twenty
    issuer.gate.set()
    assert set(await asyncio.gather(*waiting)) == {"tok-0"}
    assert issuer.count == 1 and cache.fetches == 1


async def test_a_failed_renewal_keeps_the_valid_token_and_fails_once_it_expired() -> None:
    clock, issuer = ManualClock(1_000.0), Issuer(expires_in=100)
    cache = TokenCache(issuer, clock)
    await cache.token(_auth())
    issuer.failing = True
    clock.now += 90  # due for renewal, still valid
    assert await cache.token(_auth()) == "tok-0"
    clock.now += 10  # expired
    with pytest.raises(TokenError, match="503"):
        await cache.token(_auth())


async def test_a_refused_token_is_fetched_anew_once_and_a_stale_refusal_drops_nothing() -> None:
    issuer = Issuer()
    cache = TokenCache(issuer, ManualClock(1_000.0))
    first = await cache.token(_auth())
    cache.refused(_auth(), first)
    second = await cache.token(_auth())
    assert second != first
    cache.refused(_auth(), first)  # a late 401 to the old token: the new one stays
    assert await cache.token(_auth()) == second and issuer.count == 2


async def test_a_changed_client_secret_is_another_client() -> None:
    issuer = Issuer()
    cache = TokenCache(issuer, ManualClock(1_000.0))
    assert await cache.token(_auth("one")) == "tok-0"
    assert await cache.token(_auth("two")) == "tok-1"


def _oauth_delivery(url: str, auth: OAuth2ClientCredentials) -> object:
    delivery = delivery_to(url)
    sub = Subscription.model_validate({**delivery.subscription.model_dump(), "auth": auth})
    return type(delivery)(sub, delivery.topic, delivery.message)


@pytest.fixture
async def sender() -> AsyncIterator[HttpSender]:
    async with HttpSender() as built:
        yield built


async def test_the_sender_fetches_the_token_and_retries_a_401_once_with_a_new_one(
    sender: HttpSender,
) -> None:
    async with serve_token_server({"httpbus": ["s3cret"]}) as tokens:
        refused: set[str] = set()

        def check(headers: dict[str, str]) -> bool:
            return tokens.bearer_ok(headers) and headers["Authorization"][7:] not in refused

        async with serve_receiver(check) as receiver:
            auth = _auth(url=tokens.url)
            delivery = _oauth_delivery(receiver.url_for("a"), auth)
            first = await sender.send(delivery)  # type: ignore[arg-type]
            assert first.succeeded, first
            refused.add(tokens.issued[0].token)  # the receiver no longer takes it
            again = await sender.send(delivery)  # type: ignore[arg-type]
            assert again.succeeded, again
            assert [r.status for r in receiver.got] == [204, 401, 204]
            assert len(tokens.issued) == 2
            assert tokens.forms[0] == {"grant_type": "client_credentials"}

            # A receiver that refuses every token: one retry, then the 401 is the result.
            def never(headers: dict[str, str]) -> bool:
                return False

            receiver.check = never
            before = len(receiver.got)
            last = await sender.send(delivery)  # type: ignore[arg-type]
            assert last.status == 401 and len(receiver.got) == before + 2


async def test_a_token_server_that_refuses_the_client_fails_the_attempt_retryably(
    sender: HttpSender,
) -> None:
    async with serve_token_server({"httpbus": ["other"]}) as tokens:
        async with serve_receiver(tokens.bearer_ok) as receiver:
            result = await sender.send(  # type: ignore[arg-type]
                _oauth_delivery(receiver.url_for("a"), _auth(url=tokens.url))
            )
    assert not result.succeeded and result.status is None
    assert "answered 401" in (result.error or "") and result.error_kind == "unexpected"
    assert receiver.got == []


async def test_the_token_url_passes_the_endpoint_policy_at_connect() -> None:
    async with (
        HttpSender(policy=EndpointPolicy()) as strict,  # no private networks
        serve_token_server({"httpbus": ["s3cret"]}) as tokens,
    ):
        with pytest.raises(TokenError, match="token URL refused"):
            await strict.fetch_token(_auth(url=tokens.url))
    assert tokens.issued == []


async def test_mtls_pools_are_one_per_identity_and_an_unused_one_is_closed() -> None:
    ca = TestCA.make()
    one, two = ca.issue("one", server=False), ca.issue("two", server=False)

    def mtls(issued: Issuance) -> MtlsAuth:
        return MtlsAuth(type="mtls", client_cert=issued.cert_pem, client_key=issued.key_pem)

    async with HttpSender() as sender:
        first = sender._tls_pool(mtls(one))
        assert sender._tls_pool(mtls(one)) is first and first is not sender.pool
        [identity] = sender._tls_used
        sender._tls_used[identity] -= MAX_TIMEOUT_MS / 1000 + 61  # unused past any attempt
        second = sender._tls_pool(mtls(two))
        assert list(sender._tls_pools.values()) == [second]
        await until(lambda: first._closed and not sender._closing, 5, "the old pool closed")


async def test_a_custom_ca_alone_verifies_the_endpoint_the_system_store_does_not(
    tmp_path: Path,
) -> None:
    ca = TestCA.make("private CA")
    cert, key = ca.issue("localhost", server=True).write(tmp_path, "server")
    receiver = AsgiReceiver()
    options = {"ssl_certfile": str(cert), "ssl_keyfile": str(key)}
    async with serve_asgi(receiver, **options) as port, HttpSender() as sender:
        url = f"https://localhost:{port}/hook/ca"
        private = delivery_to(url)
        trusted = private.subscription.model_copy(update={"auth": MtlsAuth(type="mtls", ca=ca.pem)})
        ok = await sender.send(type(private)(trusted, private.topic, private.message))
        unknown = await sender.send(private)  # the system's trust store: not our CA
    assert ok.succeeded, ok
    assert not unknown.succeeded and "CERTIFICATE_VERIFY_FAILED" in (unknown.error or "")
    assert len(receiver.got) == 1


async def test_an_attempt_cancelled_while_fetching_fails_the_others_retryably() -> None:
    issuer = Issuer()
    issuer.gate = asyncio.Event()
    cache = TokenCache(issuer, ManualClock(1_000.0))
    fetching = asyncio.create_task(cache.token(_auth()))
    await until(lambda: cache.fetches == 1, 5, "the fetch to begin")
    waiting = asyncio.create_task(cache.token(_auth()))
    await asyncio.sleep(0)  # proves the second waits on the first's fetch
    fetching.cancel()
    with pytest.raises(TokenError, match="no token"):
        await waiting
    issuer.gate.set()
    assert await cache.token(_auth()) == "tok-0"  # the next call fetches anew

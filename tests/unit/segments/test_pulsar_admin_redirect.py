"""A call on a topic another broker owns: the broker asked answers 307 with the owner's URL,
and the admin follows it with the same method, body and token (``httpx`` would drop the
token on the way to another port). Found with two brokers (tests/chaos/test_bookie_killed.py)."""

from __future__ import annotations

import httpx

from segments.pulsar.admin import PulsarAdmin

OWNER = "http://127.0.0.1:8081"


def _brokers(seen: list[tuple[str, str, str | None]]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append((request.method, str(request.url), request.headers.get("authorization")))
        if request.url.port == 8080:
            location = f"{OWNER}{request.url.path}?authoritative=true"
            return httpx.Response(307, headers={"Location": location})
        return httpx.Response(200, json={"partitions": 4})

    return httpx.MockTransport(answer)


async def test_a_redirect_to_the_owning_broker_is_followed_with_the_token() -> None:
    seen: list[tuple[str, str, str | None]] = []
    async with httpx.AsyncClient(transport=_brokers(seen)) as http:
        admin = PulsarAdmin(
            "http://127.0.0.1:8080", tenant="t", namespace="n", timeout_s=5, token="k", http=http
        )
        assert await admin.partition_count("orders") == 4
    path = "/admin/v2/persistent/t/n/orders/partitions"
    assert seen == [
        ("GET", f"http://127.0.0.1:8080{path}", "Bearer k"),
        ("GET", f"{OWNER}{path}?authoritative=true", "Bearer k"),
    ]

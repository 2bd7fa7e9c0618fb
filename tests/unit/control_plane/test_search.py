"""The header search (``GET /v1/search`` and ``/ui/search``): topics and subscriptions by
part of their name, and a message id in any topic the caller may see (from the trace index),
never in a project it may not see."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from core.audit import AuditEvent, AuditType
from reports.trace import SourcedEvent, TraceIndex
from tests.support.control_plane import create_shop, embedded_control_plane
from tests.support.ui_pages import login


def _accepted(project: str, topic: str, mid: str, at: int) -> SourcedEvent:
    event = AuditEvent(
        type=AuditType.ACCEPTED,
        message_id=mid,
        project=project,
        topic=topic,
        at_ms=int(time.time() * 1000),
    )
    return SourcedEvent(f"0:{at}:0", event)


async def test_search_finds_names_and_a_message_in_the_projects_you_may_see(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/reports.db"
    async with embedded_control_plane(tmp_path, database_url=url) as cp:
        client = cp.client
        await create_shop(client)
        assert (await client.post("/v1/projects", json={"name": "lab"})).status_code == 201
        topic = {"name": "orders-eu", "partitions": 1}
        assert (await client.post("/v1/projects/lab/topics", json=topic)).status_code == 201
        sub = {
            "name": "order-mailer",
            "topic": "orders",
            "endpoint": {"url": "http://127.0.0.1:9/"},
        }
        assert (await client.post("/v1/projects/shop/subscriptions", json=sub)).status_code == 201
        index = TraceIndex.from_url(url)
        try:
            index.insert(
                [
                    _accepted("shop", "orders", "m-42", 1),
                    _accepted("lab", "orders-eu", "m-42", 2),
                ]
            )
        finally:
            index.close()

        found = (await client.get("/v1/search", params={"q": "ORDER"})).json()
        assert found["topics"] == [
            {"project": "lab", "topic": "orders-eu"},
            {"project": "shop", "topic": "orders"},
        ]
        assert found["subscriptions"] == [{"project": "shop", "subscription": "order-mailer"}]
        hits = (await client.get("/v1/search", params={"q": "m-42"})).json()["messages"]
        assert [(h["project"], h["topic"]) for h in hits] == [
            ("lab", "orders-eu"),
            ("shop", "orders"),
        ]

        body = {"name": "vic", "password": "pw-vicvicvic", "roles": ["viewer:shop"]}
        assert (await client.post("/v1/users", json=body)).status_code == 201
        token = (await client.post("/v1/tokens", json={"user": "vic"})).json()["token"]
        viewer = {"Authorization": f"Bearer {token}"}
        mine = (await client.get("/v1/search", params={"q": "m-42"}, headers=viewer)).json()
        assert [(h["project"], h["topic"]) for h in mine["messages"]] == [("shop", "orders")]
        mine = (await client.get("/v1/search", params={"q": "order"}, headers=viewer)).json()
        assert [t["project"] for t in mine["topics"]] == ["shop"]
        refused = await client.get("/v1/search", params={"q": ""})
        assert refused.status_code == 422 and refused.json()["code"]

        assert cp.app is not None
        transport = httpx.ASGITransport(app=cp.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as ui:
            await login(ui)
            page = (await ui.get("/ui/search", params={"q": "m-42"})).text
            assert 'href="/ui/projects/shop/topics/orders/messages/m-42"' in page
            assert 'id="header-search"' in page
            page = (await ui.get("/ui/search", params={"q": "mailer"})).text
            assert 'href="/ui/projects/shop/subscriptions/order-mailer"' in page
            none = (await ui.get("/ui/search", params={"q": "nothing-here"})).text
            assert 'id="search-none"' in none

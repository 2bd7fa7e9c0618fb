"""What the OpenAPI says is what the API does (issue 38): a 405 answers with every method
the path's document lists in ``Allow``, and name fields state the name rule as a pattern."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from core.names import MAX_NAME, NAME_PATTERN
from tests.support.control_plane import ControlPlane, create_shop, embedded_control_plane

METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(tmp_path) as built:
        await create_shop(built.client)
        yield built


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "shop", path)


async def test_a_405_allows_every_method_the_document_lists(cp: ControlPlane) -> None:
    assert cp.app is not None
    paths: dict[str, Any] = cp.app.openapi()["paths"]
    checked = 0
    for path, item in paths.items():
        if not path.startswith("/v1/projects") or path.count("{") > 2:
            continue
        listed = sorted(m.upper() for m in item if m.upper() in METHODS)
        missing = [m for m in METHODS if m not in listed]
        if not missing:
            continue
        r = await cp.client.request(missing[0], _concrete(path))
        if r.status_code != 405:  # another route's path matched this one's text
            continue
        assert sorted(r.headers["allow"].split(", ")) == listed, (path, r.headers["allow"])
        checked += 1
    assert checked > 10


def _name_fields(schemas: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for model, schema in schemas.items():
        for field, spec in schema.get("properties", {}).items():
            if field in ("name", "project", "topic_project", "cluster") and "type" in spec:
                found.append((f"{model}.{field}", spec))
    return found


async def test_name_fields_state_the_name_rule(cp: ControlPlane) -> None:
    assert cp.app is not None
    schemas = cp.app.openapi()["components"]["schemas"]
    fields = dict(_name_fields(schemas))
    for wanted in ("ProjectCreate.name", "TopicCreate.name", "SubscriptionCreate.name"):
        assert fields[wanted]["pattern"] == NAME_PATTERN, wanted
        assert fields[wanted]["maxLength"] == MAX_NAME
    # The check still words the refusal.
    r = await cp.client.post("/v1/projects", json={"name": "../x"})
    assert r.status_code == 422 and "invalid name" in r.text


def test_the_producers_paths_state_the_name_rule() -> None:
    from producer_api.app import create_app
    from producer_api.settings import ProducerSettings

    app = create_app(ProducerSettings(admin_token="a-token-of-the-test-0123456789"))
    paths = app.openapi()["paths"]
    produce = "/v1/projects/{project}/topics/{topic}/produce"
    for path in (produce, produce + "/batch"):
        for param in paths[path]["post"]["parameters"]:
            assert param["schema"]["pattern"] == NAME_PATTERN, (path, param)

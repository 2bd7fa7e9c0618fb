"""``httpbus topic schema set|get|versions|delete`` against a control plane on the embedded
backends: text and ``--output json``, and the README's exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import as_json, httpbus, ok, one_line_error, shop_control_plane_url

V1 = {"type": "object", "properties": {"amount": {"type": "integer"}}}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shop_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def test_set_get_versions_and_a_breaking_change(url: str, tmp_path: Path) -> None:
    first = tmp_path / "v1.json"
    first.write_text(json.dumps(V1))
    out = ok(httpbus(url, "topic", "schema", "set", "shop", "orders", str(first)))
    assert "shop/orders schema version 1 (compatibility backward)" in out

    breaking = json.dumps({**V1, "required": ["amount"]})
    r = httpbus(url, "topic", "schema", "set", "shop", "orders", "-", input=breaking)
    one_line_error(r, 4, "409 schema_incompatible", "$.amount")

    r = httpbus(
        url, "topic", "schema", "set", "shop", "orders", "-", "--compatibility", "none",
        "-o", "json", input=breaking,
    )  # fmt: skip
    assert as_json(r)["version"] == 2

    assert as_json(httpbus(url, "topic", "schema", "get", "shop", "orders", "-o", "json"))[
        "schema"
    ]["required"] == ["amount"]
    shown = ok(httpbus(url, "topic", "schema", "get", "shop", "orders", "--version", "1"))
    assert "schema version 1" in shown and '"amount"' in shown
    listed = as_json(httpbus(url, "topic", "schema", "versions", "shop", "orders", "-o", "json"))
    assert listed["versions"] == [1, 2] and listed["compatibility"] == "none"
    assert "latest" in ok(httpbus(url, "topic", "schema", "versions", "shop", "orders"))

    ok(httpbus(url, "topic", "schema", "delete", "shop", "orders", "--yes"))
    one_line_error(httpbus(url, "topic", "schema", "get", "shop", "orders"), 3, "404")


def test_bad_input_exits_with_the_usage_or_refusal_code(url: str, tmp_path: Path) -> None:
    one_line_error(
        httpbus(url, "topic", "schema", "set", "shop", "orders", str(tmp_path / "none.json")),
        2,
        "cannot read",
    )
    r = httpbus(url, "topic", "schema", "set", "shop", "orders", "-", input='{"type": 5}')
    one_line_error(r, 1, "422 validation_failed")
    r = httpbus(url, "topic", "schema", "set", "shop", "ghost", "-", input="{}")
    one_line_error(r, 3, "404")

"""``httpbus sub rotate-secret|reveal-secret`` against a real control plane (embedded
backends, served over HTTP in this process); ``sub list`` says whether a secret is set and
when it was rotated, never the secret."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.support.cli import TOKEN, as_json, httpbus, ok, one_line_error, shop_control_plane_url

OLD = "whsec_" + "QUFB" * 8
NEW = "whsec_" + "QkJC" * 8


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shop_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def _create(url: str, name: str) -> str:
    args = ["sub", "create", "shop", name, "--topic", "orders"]
    created = as_json(httpbus(url, *args, "--endpoint", "http://127.0.0.1:9/hook", "-o", "json"))
    secret: str = created["signing_secret"]
    return secret


def test_create_shows_the_secret_once_list_never(url: str) -> None:
    secret = _create(url, "s1")
    assert secret.startswith("whsec_")
    for args in (["sub", "list", "shop"], ["sub", "list", "shop", "-o", "json"]):
        out = ok(httpbus(url, *args))
        assert "s1" in out and "whsec_" not in out
    assert "set" in ok(httpbus(url, "sub", "list", "shop"))


def test_rotate_reveal_and_list(url: str) -> None:
    first = _create(url, "s2")
    shown = as_json(
        httpbus(url, "sub", "rotate-secret", "shop", "s2", "--secret", NEW, "-o", "json")
    )
    assert [e["secret"] for e in shown["secrets"]] == [NEW, first]
    text = ok(httpbus(url, "sub", "reveal-secret", "shop", "s2"))
    assert NEW in text and first in text and "current" in text and "until" in text
    listed = ok(httpbus(url, "sub", "list", "shop"))
    assert "whsec_" not in listed and "previous signs until" in listed
    generated = ok(httpbus(url, "sub", "rotate-secret", "shop", "s2", "--overlap-s", "0"))
    assert "whsec_" in generated and first in generated  # the first is still in its overlap


def test_bad_rotations_exit_with_one_line(url: str) -> None:
    _create(url, "s3")
    args = ["sub", "rotate-secret", "shop", "s3"]
    one_line_error(httpbus(url, *args, "--secret", "nope"), 1, "422", "secret")
    one_line_error(httpbus(url, *args, "--overlap-s", "99999999"), 1, "422", "overlap_s")
    one_line_error(httpbus(url, "sub", "reveal-secret", "shop", "nope"), 3, "404")
    assert httpbus(url, *args, "--overlap-s", "-1").exit_code == 2


def test_endpoint_credentials_are_masked_kept_on_update_and_revealed(url: str) -> None:
    sub = {
        "name": "s4",
        "topic": "orders",
        "endpoint": {
            "url": "http://127.0.0.1:9/hook",
            "headers": {"Authorization": "Bearer sekret-cli-1", "X-Region": "eu"},
        },
    }
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{url}/v1/projects/shop/subscriptions", json=sub, headers=auth)
    assert r.status_code == 201, r.text
    for args in (["sub", "list", "shop"], ["sub", "list", "shop", "-o", "json"]):
        assert "sekret-cli-1" not in ok(httpbus(url, *args))
    listed = as_json(httpbus(url, "sub", "list", "shop", "-o", "json"))
    [s4] = [s for s in listed["items"] if s["name"] == "s4"]
    assert s4["endpoint"]["headers"] == {"Authorization": "********", "X-Region": "eu"}
    # The CLI's update sends back what it read: the credential is kept.
    ok(httpbus(url, "sub", "update", "shop", "s4", "--max-in-flight", "5"))
    text = ok(httpbus(url, "sub", "reveal-secret", "shop", "s4"))
    assert "Authorization: Bearer sekret-cli-1" in text and "X-Region" not in text

"""``httpbus sub create|update`` with the endpoint authentication flags (``--auth`` …)
against a real control plane (embedded backends, served over HTTP in this process): the
settings reach the API, write-only values are never printed and kept by updates that do
not give them, and a misuse exits with one line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.auth_doubles import TestCA
from tests.support.cli import as_json, httpbus, ok, one_line_error, shop_control_plane_url

HOOK = "https://hooks.example.com/in"


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with shop_control_plane_url(tmp_path_factory.mktemp("cp")) as base:
        yield base


def _create(url: str, name: str, *flags: str) -> dict[str, object]:
    args = ["sub", "create", "shop", name, "--topic", "orders", "--endpoint", HOOK]
    created = as_json(httpbus(url, *args, *flags, "-o", "json"))
    assert isinstance(created, dict)
    return created


def _reveal(url: str, name: str) -> dict[str, str]:
    shown = as_json(httpbus(url, "sub", "reveal-secret", "shop", name, "-o", "json"))
    return dict(shown["auth_secrets"])


def test_jwt_and_its_audience(url: str) -> None:
    created = _create(url, "j", "--auth", "jwt", "--audience", "urn:hooks")
    assert created["auth"] == {"type": "jwt", "audience": "urn:hooks"}
    ok(httpbus(url, "sub", "update", "shop", "j", "--description", "kept"))
    shown = as_json(httpbus(url, "sub", "list", "shop", "-o", "json"))
    [j] = [s for s in shown["items"] if s["name"] == "j"]
    assert j["auth"] == {"type": "jwt", "audience": "urn:hooks"} and j["description"] == "kept"


def test_oauth_secret_from_a_file_is_never_printed_and_kept_by_updates(
    url: str, tmp_path: Path
) -> None:
    secret = tmp_path / "secret"
    secret.write_text("sekret-from-file\n")
    flags = ["--auth", "oauth2_client_credentials", "--token-url", "https://id.example/token"]
    flags += ["--client-id", "httpbus", "--client-secret-file", str(secret)]
    created = _create(url, "o", *flags)
    assert created["auth"]["client_secret"] == "********"  # type: ignore[index]
    out = ok(httpbus(url, "sub", "update", "shop", "o", "--scope", "hooks:write"))
    assert "sekret" not in out
    assert _reveal(url, "o") == {"client_secret": "sekret-from-file"}
    secret.write_text("rotated")
    ok(httpbus(url, "sub", "update", "shop", "o", "--client-secret-file", str(secret)))
    assert _reveal(url, "o") == {"client_secret": "rotated"}
    ok(httpbus(url, "sub", "update", "shop", "o", "--auth", "none"))
    assert _reveal(url, "o") == {}


def test_mtls_from_pem_files(url: str, tmp_path: Path) -> None:
    ca = TestCA.make()
    cert, key = ca.issue("worker", server=False).write(tmp_path, "client")
    (tmp_path / "ca.pem").write_text(ca.pem)
    flags = ["--client-cert", str(cert), "--client-key", str(key), "--ca", str(tmp_path / "ca.pem")]
    created = _create(url, "m", "--auth", "mtls", *flags)
    assert created["auth"]["client_key"] == "********"  # type: ignore[index]
    ok(httpbus(url, "sub", "update", "shop", "m", "--description", "kept"))
    assert _reveal(url, "m") == {"client_key": key.read_text()}
    assert _create(url, "ca-only", "--ca", str(tmp_path / "ca.pem"))["auth"]["type"] == "mtls"  # type: ignore[index]


def test_signing_keys_list_and_rotate(url: str) -> None:
    _create(url, "jk", "--auth", "jwt")  # the first key is made with it
    listed = ok(httpbus(url, "signing-keys", "list"))
    assert "signing" in listed and "ES256" in listed
    rotated = as_json(httpbus(url, "signing-keys", "rotate", "--lead-s", "60", "-o", "json"))
    states = [k["signing"] for k in rotated["keys"]]
    assert states[-1] is False and True in states
    assert "waiting" in ok(httpbus(url, "signing-keys", "list"))
    assert httpbus(url, "signing-keys", "rotate", "--lead-s", "-1").exit_code == 2


def test_misuse_exits_with_one_line(url: str) -> None:
    create = ["sub", "create", "shop", "x", "--topic", "orders", "--endpoint", HOOK]
    one_line_error(httpbus(url, *create, "--token-url", "https://id.example/t"), 2, "--auth")
    one_line_error(httpbus(url, *create, "--auth", "jwt", "--scope", "s"), 2, "--scope")
    one_line_error(httpbus(url, *create, "--auth", "none", "--audience", "a"), 2, "none")
    one_line_error(
        httpbus(url, *create, "--auth", "oauth2_client_credentials", "--client-id", "i"),
        1,
        "422",
        "auth",
    )

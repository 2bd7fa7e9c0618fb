"""``httpbus user create|list|grant|revoke|delete|password`` and ``httpbus user token
create|list|revoke`` against a real control plane (embedded backends and a SQLite relational
store, served over HTTP in this process): text and ``--output json``, the documented exit
codes, and a user's API token used as the CLI's ``--token``, acting with the user's roles."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import as_json, httpbus, ok, one_line_error, shop_control_plane_url


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    data: Path = tmp_path_factory.mktemp("cp")
    with shop_control_plane_url(data, database_url=f"sqlite:///{data / 'reports.db'}") as base:
        ok(httpbus(base, "project", "create", "other"))
        yield base


def test_users_roles_and_a_users_token_in_the_cli(url: str) -> None:
    made = as_json(
        httpbus(
            url,
            "user",
            "create",
            "alice",
            "--role",
            "viewer:shop",
            "--password-stdin",
            "-o",
            "json",
            input="alice's password\n",
        )
    )
    assert made["roles"] == ["viewer:shop"] and "password" not in made
    text = ok(httpbus(url, "user", "grant", "alice", "owner:other"))
    assert text.strip() == "granted; now user alice: owner:other, viewer:shop"
    listed = as_json(httpbus(url, "user", "list", "-o", "json"))["items"]
    assert [(u["name"], u["roles"]) for u in listed] == [("alice", ["owner:other", "viewer:shop"])]
    assert "alice" in ok(httpbus(url, "user", "list"))
    created = as_json(httpbus(url, "user", "token", "create", "alice", "-o", "json"))
    assert created["token"].startswith("hbk.")
    # Her token as the CLI's credential: she reads shop, and may not change it (exit 1).
    topics = as_json(httpbus(url, "topic", "list", "shop", "-o", "json", token=created["token"]))
    assert [t["name"] for t in topics["items"]] == ["orders"]
    one_line_error(
        httpbus(url, "topic", "create", "shop", "events", token=created["token"]),
        1,
        "403 forbidden",
        "this needs owner of shop",
    )
    ok(httpbus(url, "topic", "create", "other", "events", token=created["token"]))
    # Managing principals is an admin's: refused with her token.
    one_line_error(httpbus(url, "user", "list", token=created["token"]), 1, "403", "admin")
    revoked = as_json(httpbus(url, "user", "revoke", "alice", "owner:other", "-o", "json"))
    assert revoked["roles"] == ["viewer:shop"]
    one_line_error(
        httpbus(url, "topic", "create", "other", "more", token=created["token"]), 1, "403"
    )
    tokens = as_json(httpbus(url, "user", "token", "list", "alice", "-o", "json"))["items"]
    assert [t["id"] for t in tokens] == [created["id"]] and "hbk." not in str(tokens)
    ok(httpbus(url, "user", "token", "revoke", created["id"], "--yes"))
    one_line_error(
        httpbus(url, "topic", "list", "shop", token=created["token"]), 1, "401 unauthorized"
    )


def test_errors_have_their_exit_codes(url: str) -> None:
    pw = "a long password\n"
    ok(httpbus(url, "user", "create", "bob", "--password-stdin", input=pw))
    one_line_error(
        httpbus(url, "user", "create", "bob", "--password-stdin", input=pw), 4, "already_exists"
    )
    one_line_error(httpbus(url, "user", "grant", "ghost", "viewer:shop"), 3, "ghost")
    one_line_error(
        httpbus(
            url, "user", "create", "carl", "--role", "owner:nope", "--password-stdin", input=pw
        ),
        1,
        "422",
        "roles",
    )
    one_line_error(
        httpbus(url, "user", "create", "dora", "--password-stdin", input="short\n"),
        1,
        "password",
    )
    one_line_error(httpbus(url, "user", "create", "erin"), 2, "--password-stdin")
    one_line_error(httpbus(url, "user", "delete", "bob"), 2, "--yes")
    ok(httpbus(url, "user", "password", "bob", "--password-stdin", input="another password\n"))
    deleted = as_json(httpbus(url, "user", "delete", "bob", "--yes", "-o", "json"))
    assert deleted == {"deleted": "bob"}
    one_line_error(httpbus(url, "user", "token", "create", "bob"), 3, "not_found")

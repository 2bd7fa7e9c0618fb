"""``httpbus sub resend`` and ``sub recover`` against a double of their two routes: a resend
per id (stopping at the first the API refuses, with its message), a recovery looping until
none of the window remain, and the usage errors."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI

from core.errors import NotFound
from tests.support.cli import httpbus as run
from tests.support.cli import one_line_error
from tests.support.contract_api import bare_app, served

SUB = "/v1/projects/shop/subscriptions/s1"


class Seen:
    def __init__(self) -> None:
        self.resends: list[str] = []
        self.recovers: list[dict[str, Any]] = []
        self.left = 2_500


@pytest.fixture
def double() -> Iterator[tuple[str, Seen]]:
    app: FastAPI = bare_app()
    seen = Seen()

    @app.post(f"{SUB}/resend", status_code=202)
    async def resend(body: dict[str, Any]) -> dict[str, Any]:
        mid = body["message_id"]
        if mid == "nope":
            raise NotFound(f"message {mid} of shop/orders is not in the trace index")
        seen.resends.append(mid)
        trace = f"/v1/projects/shop/topics/orders/messages/{mid}"
        return {"message_id": mid, "subscription": "shop/s1", "trace": trace}

    @app.post(f"{SUB}/recover")
    async def recover(body: dict[str, Any]) -> dict[str, Any]:
        seen.recovers.append(body)
        done = min(body["limit"], seen.left)
        seen.left -= done
        return {"recovered": done, "remaining": seen.left}

    with served(app) as url:
        yield url, seen


def test_resend_each_id(double: tuple[str, Seen]) -> None:
    url, seen = double
    r = run(url, "sub", "resend", "shop", "s1", "m1", "m2")
    assert r.exit_code == 0, r.stderr
    assert "resent 2 to shop/s1" in r.stdout and "messages/m2" in r.stdout
    assert seen.resends == ["m1", "m2"]
    answer = json.loads(run(url, "sub", "resend", "shop", "s1", "m3", "-o", "json").stdout)
    assert [a["message_id"] for a in answer] == ["m3"]
    one_line_error(run(url, "sub", "resend", "shop", "s1", "m4", "nope", "m5"), 3, "nope")
    assert seen.resends == ["m1", "m2", "m3", "m4"]  # stopped at the refused one


def test_recover_loops_until_the_window_is_empty(double: tuple[str, Seen]) -> None:
    url, seen = double
    since = "2026-01-01T00:00:00Z"
    r = run(url, "sub", "recover", "shop", "s1", "--since", since, "--batch", "1000")
    assert r.exit_code == 0, r.stderr
    assert "recovered 2500" in r.stdout and len(seen.recovers) == 3
    first = seen.recovers[0]
    assert first["since"] == since and first["until"].endswith("Z") and first["limit"] == 1000
    one_line_error(run(url, "sub", "recover", "shop", "s1", "--since", "soon"), 2, "RFC 3339")
    until = ("--until", "2026-01-02T00:00:00+01:00")
    r = run(url, "sub", "recover", "shop", "s1", "--since", since, *until, "-o", "json")
    assert json.loads(r.stdout) == {"recovered": 0}
    assert seen.recovers[-1]["until"] == until[1]


def test_usage() -> None:
    with served(bare_app()) as url:
        r = run(url, "sub", "recover", "shop", "s1")
        assert r.exit_code == 2 and "--since" in r.stderr
        r = run(url, "sub", "resend", "shop", "s1")
        assert r.exit_code == 2
        one_line_error(run(url, "sub", "resend", "shop", "s1", "m1"), 5, "not available")

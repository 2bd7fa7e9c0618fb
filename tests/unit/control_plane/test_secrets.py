"""Signing secrets in the admin API (embedded backends): never shown by a read, rotated with
an overlap (``secret:rotate`` or a ``PUT``), revealed only on purpose and audited, and every
bad input a stable code naming its field. Old stored records without the rotation fields
load."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from control_plane.api.schemas import SubscriptionView
from core.model import DEFAULT_SECRET_OVERLAP_S, MAX_RETIRING_SECRETS, Subscription
from metastore import paths
from tests.support.control_plane import (
    AUTH,
    SUB_FORM,
    ControlPlane,
    create_shop,
    embedded_control_plane,
)
from tests.support.ui_pages import csrf, login

SUBS = "/v1/projects/shop/subscriptions"
OLD = "whsec_" + "QUFB" * 8
NEW = "whsec_" + "QkJC" * 8
SUB = {"name": "s1", "topic": "orders", "endpoint": {"url": "http://127.0.0.1:9/hook"}}


@pytest.fixture
async def cp(tmp_path: Path) -> AsyncIterator[ControlPlane]:
    async with embedded_control_plane(tmp_path) as built:
        await create_shop(built.client)
        r = await built.client.post(SUBS, json={**SUB, "signing_secret": OLD})
        assert r.status_code == 201, r.text
        yield built


def _no_secret(body: Any) -> None:
    text = json.dumps(body)
    assert "whsec_" not in text and "retiring_secrets" not in text, text


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def test_create_shows_the_secret_once_and_reads_never(cp: ControlPlane) -> None:
    generated = await cp.client.post(SUBS, json={**SUB, "name": "s2"})
    assert generated.json()["signing_secret"].startswith("whsec_")
    for url in (SUBS, f"{SUBS}/s1", f"{SUBS}/s2"):
        r = await cp.client.get(url)
        assert r.status_code == 200
        _no_secret(r.json())
    shown = (await cp.client.get(f"{SUBS}/s1")).json()
    assert shown["signing_secret_set"] is True
    assert shown["signing_secret_rotated_at"] is None and shown["previous_secrets_until"] is None
    for action in ("stop", "start"):
        _no_secret((await cp.client.post(f"{SUBS}/s1/{action}")).json())
    stored = await cp.catalog.get_subscription("shop", "s1")
    assert stored.signing_secret == OLD  # kept in the metastore as before


async def test_rotate_with_a_chosen_secret_keeps_the_old_one_for_the_overlap(
    cp: ControlPlane,
) -> None:
    before = datetime.now(UTC)
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"secret": NEW, "overlap_s": 600})
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["signing_secret"] == NEW
    [current, old] = shown["secrets"]
    assert current == {"secret": NEW, "until": None} and old["secret"] == OLD
    until = _at(old["until"])
    assert 599 <= (until - before).total_seconds() <= 610
    sub = await cp.catalog.get_subscription("shop", "s1")
    assert sub.secrets_at(before.timestamp() + 1) == (NEW, OLD)
    assert sub.secrets_at(until.timestamp() + 1) == (NEW,)
    read = (await cp.client.get(f"{SUBS}/s1")).json()
    _no_secret(read)
    assert _at(read["previous_secrets_until"]) == until
    assert _at(read["signing_secret_rotated_at"]) >= before


async def test_rotate_without_a_body_generates_a_secret_with_the_default_overlap(
    cp: ControlPlane,
) -> None:
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate")
    assert r.status_code == 200, r.text
    shown = r.json()
    assert shown["signing_secret"].startswith("whsec_") and shown["signing_secret"] != OLD
    [_, old] = shown["secrets"]
    overlap = _at(old["until"]) - _at(shown["signing_secret_rotated_at"])
    assert overlap.total_seconds() == DEFAULT_SECRET_OVERLAP_S


async def test_rotate_with_no_overlap_drops_the_old_secret_at_once(cp: ControlPlane) -> None:
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"secret": NEW, "overlap_s": 0})
    assert [e["secret"] for e in r.json()["secrets"]] == [NEW]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"overlap_s": -1}, "overlap_s"),
        ({"overlap_s": 7 * 24 * 3600 + 1}, "overlap_s"),
        ({"overlap_s": "soon"}, "overlap_s"),
        ({"secret": "whsec_not base64!!!!!!!!!!!!"}, "secret"),
        ({"secret": "short"}, "secret"),
        ({"secret": "QkJC" * 8}, "secret"),  # no whsec_
        ({"secret": "whsec_" + "AAAA" * 8}, "secret"),  # a key of zeros
        ({"secret": OLD}, "secret"),  # the one in force
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_rotations_are_422_naming_the_field(
    cp: ControlPlane, body: dict[str, Any], field: str
) -> None:
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate", json=body)
    assert (r.status_code, r.json()["code"]) == (422, "validation_failed"), r.text
    assert [f["field"] for f in r.json()["details"]["fields"]] == [field]
    assert (await cp.catalog.get_subscription("shop", "s1")).signing_secret == OLD


async def test_rotating_back_to_a_secret_still_signing_is_refused(cp: ControlPlane) -> None:
    await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"secret": NEW})
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"secret": OLD})
    assert r.status_code == 422 and r.json()["details"]["fields"][0]["field"] == "secret"


async def test_too_many_overlapping_rotations_are_409(cp: ControlPlane) -> None:
    for _ in range(MAX_RETIRING_SECRETS):
        assert (await cp.client.post(f"{SUBS}/s1/secret:rotate")).status_code == 200
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate")
    assert (r.status_code, r.json()["code"]) == (409, "too_many_secrets")
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"overlap_s": 0})
    assert r.status_code == 200 and len(r.json()["secrets"]) == MAX_RETIRING_SECRETS + 1


async def test_unknown_subscription_is_404(cp: ControlPlane) -> None:
    for action in ("rotate", "reveal"):
        r = await cp.client.post(f"{SUBS}/nope/secret:{action}")
        assert (r.status_code, r.json()["code"]) == (404, "not_found")


async def test_put_with_a_new_secret_rotates_with_the_default_overlap(cp: ControlPlane) -> None:
    current = (await cp.client.get(f"{SUBS}/s1")).json()
    body = {"endpoint": current["endpoint"], "version": current["version"], "max_in_flight": 7}
    r = await cp.client.put(f"{SUBS}/s1", json={**body, "signing_secret": NEW})
    assert r.status_code == 200, r.text
    _no_secret(r.json())
    sub = await cp.catalog.get_subscription("shop", "s1")
    assert sub.max_in_flight == 7 and sub.signing_secret == NEW
    [old] = sub.retiring_secrets
    assert old.secret == OLD
    assert sub.signing_secret_rotated_at is not None
    overlap = old.until - sub.signing_secret_rotated_at
    assert overlap.total_seconds() == DEFAULT_SECRET_OVERLAP_S
    # The same secret again, or none: a plain update.
    again = {**body, "version": sub.version, "signing_secret": NEW}
    assert (await cp.client.put(f"{SUBS}/s1", json=again)).status_code == 200
    assert (await cp.catalog.get_subscription("shop", "s1")).retiring_secrets == (old,)
    sub = await cp.catalog.get_subscription("shop", "s1")
    bad = {**body, "version": sub.version, "signing_secret": "whsec_!!!!!!!!!!!!!!!!!!!!!!!"}
    r = await cp.client.put(f"{SUBS}/s1", json=bad)
    assert r.status_code == 422 and r.json()["details"]["fields"][0]["field"] == "signing_secret"
    back = {**body, "version": sub.version, "signing_secret": OLD}  # still signing
    r = await cp.client.put(f"{SUBS}/s1", json=back)
    assert r.status_code == 422 and r.json()["details"]["fields"][0]["field"] == "signing_secret"


async def test_reveal_shows_every_secret_in_force_and_is_audited(
    cp: ControlPlane, caplog: pytest.LogCaptureFixture
) -> None:
    await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"secret": NEW, "overlap_s": 60})
    with caplog.at_level(logging.INFO, logger="httpbus.audit"):
        r = await cp.client.post(f"{SUBS}/s1/secret:reveal")
    assert r.status_code == 200
    assert [e["secret"] for e in r.json()["secrets"]] == [NEW, OLD]
    [line] = [rec for rec in caplog.records if rec.name == "httpbus.audit"]
    text = line.getMessage()
    assert "shop/s1" in text and "by=admin-token" in text and "whsec_" not in text


async def test_reveal_and_rotate_need_the_admin_token(cp: ControlPlane) -> None:
    for action in ("rotate", "reveal"):
        url = f"{SUBS}/s1/secret:{action}"
        r = await cp.client.post(url, headers={"Authorization": "Bearer wrong"})
        assert (r.status_code, r.json()["code"]) == (401, "unauthorized")
        r = await cp.client.post(url, headers={"Authorization": ""})
        assert r.status_code == 401
    assert (await cp.catalog.get_subscription("shop", "s1")).signing_secret == OLD


async def test_a_record_stored_before_rotations_loads(cp: ControlPlane) -> None:
    """A subscription node written by a version without the rotation fields."""
    path = paths.subscription("shop", "s1")
    node = await cp.meta.get(path)
    assert node is not None
    stored = json.loads(node.data)
    for name in ("signing_secret_rotated_at", "retiring_secrets"):
        stored.pop(name, None)
    await cp.meta.update(path, json.dumps(stored).encode(), expected_version=node.version)
    sub = await cp.catalog.get_subscription("shop", "s1")
    assert sub.retiring_secrets == () and sub.signing_secret_rotated_at is None
    assert sub.secrets_at(0) == (OLD,)
    r = await cp.client.post(f"{SUBS}/s1/secret:rotate", json={"secret": NEW})
    assert r.status_code == 200 and [e["secret"] for e in r.json()["secrets"]] == [NEW, OLD]


async def test_expired_overlaps_are_not_shown(cp: ControlPlane) -> None:
    sub = await cp.catalog.get_subscription("shop", "s1")
    past = datetime(2020, 1, 1, tzinfo=UTC)
    await cp.catalog.update_subscription(sub.rotated(NEW, past, 60))
    shown = (await cp.client.post(f"{SUBS}/s1/secret:reveal")).json()
    assert [e["secret"] for e in shown["secrets"]] == [NEW]
    assert (await cp.client.get(f"{SUBS}/s1")).json()["previous_secrets_until"] is None


def test_the_view_has_every_field_but_the_secrets() -> None:
    secret_fields = {"signing_secret", "retiring_secrets"}
    assert set(Subscription.model_fields) - secret_fields <= set(SubscriptionView.model_fields)
    assert not secret_fields & set(SubscriptionView.model_fields)


async def test_the_ui_pages_show_the_state_never_the_secret(tmp_path: Path) -> None:
    async with embedded_control_plane(tmp_path, admin=False, base_url="http://testserver") as cp:
        browser = cp.client
        await login(browser)
        await create_shop(browser, headers=AUTH)
        r = await browser.post(SUBS, json={**SUB, "signing_secret": OLD}, headers=AUTH)
        assert r.status_code == 201
        await browser.post(f"{SUBS}/s1/secret:rotate", json={"secret": NEW}, headers=AUTH)
        pages = [
            "/ui/projects/shop/subscriptions",
            "/ui/projects/shop/subscriptions/s1",
            "/ui/projects/shop/subscriptions/s1/edit",
        ]
        for url in pages:
            page = await browser.get(url)
            assert page.status_code == 200 and "whsec_" not in page.text, url
        page = (await browser.get(pages[1])).text
        assert 'id="signing-secret"' in page and "the previous one signs too until" in page
        # Saving the edit form keeps the secrets (the form has none to send).
        token = await csrf(browser, pages[2])
        r = await browser.post(pages[2], data={**SUB_FORM, "max_in_flight": "5", "csrf": token})
        assert r.status_code == 303, r.text[:500]
        sub = await cp.catalog.get_subscription("shop", "s1")
        assert sub.max_in_flight == 5 and sub.signing_secret == NEW
        assert [r.secret for r in sub.retiring_secrets] == [OLD]

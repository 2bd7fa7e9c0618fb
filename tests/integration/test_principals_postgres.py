"""Principals and topic grants on a real PostgreSQL (``reports.principals``): users with
argon2id passwords, a user's and a machine's API tokens, roles granted and revoked, a user's
tokens deleted with them, topic grants idempotent, a duplicate user refused; the topic
catalog's reads of every grant and of each project's owners."""

from __future__ import annotations

import pytest

from core.errors import AlreadyExists, NotFound
from core.principals import Grant, PrincipalKind, Role
from reports import migrate
from reports.principals import PrincipalStore, token_key, user_key

pytestmark = pytest.mark.postgres
OWNER = Grant(Role.OWNER, "shop")
VIEWER = Grant(Role.VIEWER, "shop")


def test_principals_round_trip_on_postgres(postgres_database: str) -> None:
    migrate.upgrade(postgres_database)
    store = PrincipalStore.from_url(postgres_database)
    try:
        store.create_user("alice", "alice's password", (VIEWER,))
        with pytest.raises(AlreadyExists):
            store.create_user("alice", "another password")
        found = store.login("alice", "alice's password")
        assert found is not None and found.grants == frozenset({VIEWER})
        assert store.login("alice", "wrong") is None
        _, plaintext = store.create_token("alice")
        store.grant(user_key("alice"), OWNER)
        by_token = store.token_principal(plaintext)
        assert by_token is not None and by_token.kind is PrincipalKind.USER
        assert by_token.grants == frozenset({OWNER, VIEWER})
        store.revoke(user_key("alice"), OWNER)
        machine, machine_text = store.create_token(None, (Grant(Role.ADMIN),), "ci")
        assert store.token_principal(machine_text) is not None
        store.revoke(token_key(machine.id), Grant(Role.ADMIN))
        assert store.tokens("alice")[0].grants == (VIEWER,)
        store.delete_user("alice")
        assert store.token_principal(plaintext) is None
        assert [t.id for t in store.tokens()] == [machine.id]
        store.revoke_token(machine.id)
        assert store.token_principal(machine_text) is None
        with pytest.raises(NotFound):
            store.user("alice")
        store.add_topic_grant("shop", "orders", "other")
        store.add_topic_grant("shop", "orders", "other")
        assert [g.grantee for g in store.topic_grants("shop", "orders")] == ["other"]
        assert store.has_topic_grant("shop", "orders", "other")
        # What the topic catalog reads: every grant at once, and each project's owning users
        # (a machine token's role is not an owner one can ask).
        store.add_topic_grant("shop", "audit", "third")
        every = [(g.project, g.topic, g.grantee) for g in store.all_topic_grants()]
        assert every == [("shop", "audit", "third"), ("shop", "orders", "other")]
        store.create_user("bob", "bob's password", (OWNER, Grant(Role.OWNER, "other")))
        store.create_user("carol", "carol's password", (OWNER, VIEWER))
        store.create_token(None, (OWNER,), "a machine owning shop")
        assert store.project_owners() == {"other": ["bob"], "shop": ["bob", "carol"]}
        store.remove_topic_grants("shop", "orders")
        assert not store.has_topic_grant("shop", "orders", "other")
    finally:
        store.engine.dispose()

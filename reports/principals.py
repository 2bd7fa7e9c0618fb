"""``PrincipalStore``: users, API tokens, their roles and topic grants in the relational store.

Passwords are kept as argon2id hashes (argon2-cffi's defaults), API tokens as a SHA-256 (they
are 32 random bytes: a slow hash adds nothing but latency to every call). An API token reads
``hbk.<id>.<secret>``: the id finds the row, the secret's hash is compared in constant time.
A user's token acts as the user with the roles the user holds *now*; a machine's token holds
roles of its own. A UI session carries the user's *stamp* (a digest of their password hash,
salted anew by every password set): a user deleted and made again under the same name, or a
changed password, has another stamp, so the sessions of before end (:meth:`PrincipalStore.
session_principal`). Synchronous like :class:`reports.store.ReportStore`: call it in a thread.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from sqlalchemy import Engine, Select, delete, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from core.errors import AlreadyExists, NotFound
from core.principals import Grant, Principal, PrincipalKind, Role

from .models import ApiTokenRow, RoleGrantRow, TopicGrantRow, UserRow
from .store import Tables, database_errors

TOKEN_PREFIX = "hbk"
_TOKEN = re.compile(r"hbk\.([a-f0-9]{12})\.[A-Za-z0-9_-]{20,100}")
_hasher = PasswordHasher()
# Verified against when the user does not exist, so an unknown name costs as much as a
# wrong password (no timing oracle for which names exist).
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


@dataclass(frozen=True)
class UserInfo:
    name: str
    grants: tuple[Grant, ...]
    created_at_ms: int


@dataclass(frozen=True)
class TokenInfo:
    id: str
    user: str | None
    grants: tuple[Grant, ...]  # a machine token's own; a user's token: the user's
    description: str
    created_at_ms: int


@dataclass(frozen=True)
class TopicGrant:
    project: str
    topic: str
    grantee: str
    created_at_ms: int


def _now_ms() -> int:
    return int(time.time() * 1000)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _stamp(password_hash: str) -> str:
    """A user's session stamp: it changes whenever the password hash does (argon2 salts every
    hash), and shows nothing of the hash, whose salt stays in the store."""
    return hashlib.sha256(b"httpbus-ui-session:" + password_hash.encode()).hexdigest()[:32]


def _same(expected: str, given: str) -> bool:
    """Constant-time equality; bytes, as ``hmac.compare_digest`` refuses str beyond ASCII."""
    return hmac.compare_digest(expected.encode(), given.encode("utf-8", "surrogatepass"))


def user_key(name: str) -> str:
    return f"user:{name}"


def token_key(token_id: str) -> str:
    return f"token:{token_id}"


def _grant(row: RoleGrantRow) -> Grant:
    return Grant(Role(row.role), row.project or None)


def _sorted(grants: list[Grant]) -> tuple[Grant, ...]:
    return tuple(sorted(grants, key=str))


class PrincipalStore(Tables):
    """The principals of the relational store at ``engine`` (schema: migration 0004)."""

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self._sessions = sessionmaker(engine, expire_on_commit=False)

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with database_errors("the principal store"), self._sessions.begin() as session:
            yield session

    # ------------------------------------------------------------------ users

    def create_user(self, name: str, password: str, grants: tuple[Grant, ...] = ()) -> UserInfo:
        row = UserRow(name=name, password_hash=_hasher.hash(password), created_at_ms=_now_ms())
        try:
            with self._session() as session:
                if session.get(UserRow, name) is not None:
                    raise AlreadyExists(f"user {name} exists")
                session.add(row)
                session.flush()
                for grant in set(grants):
                    session.add(_grant_row(user_key(name), grant))
        except IntegrityError as exc:  # a racing create of the same name
            raise AlreadyExists(f"user {name} exists") from exc
        return self.user(name)

    def user(self, name: str) -> UserInfo:
        with self._session() as session:
            row = session.get(UserRow, name)
            if row is None:
                raise NotFound(f"user {name} does not exist")
            return UserInfo(row.name, self._grants(session, user_key(name)), row.created_at_ms)

    def users(self) -> list[UserInfo]:
        with self._session() as session:
            rows = session.scalars(select(UserRow).order_by(UserRow.name)).all()
            return [
                UserInfo(r.name, self._grants(session, user_key(r.name)), r.created_at_ms)
                for r in rows
            ]

    def delete_user(self, name: str) -> None:
        """The user, their roles and their API tokens."""
        with self._session() as session:
            row = session.get(UserRow, name)
            if row is None:
                raise NotFound(f"user {name} does not exist")
            session.execute(delete(ApiTokenRow).where(ApiTokenRow.user == name))
            session.execute(delete(RoleGrantRow).where(RoleGrantRow.principal == user_key(name)))
            session.delete(row)

    def set_password(self, name: str, password: str) -> None:
        with self._session() as session:
            row = session.get(UserRow, name)
            if row is None:
                raise NotFound(f"user {name} does not exist")
            row.password_hash = _hasher.hash(password)

    def login(self, name: str, password: str) -> Principal | None:
        """The user ``name`` if ``password`` is theirs, else None (as slow either way)."""
        found = self.login_session(name, password)
        return found[0] if found is not None else None

    def login_session(self, name: str, password: str) -> tuple[Principal, str] | None:
        """:meth:`login`, with the stamp a session of this login carries."""
        with self._session() as session:
            row = session.get(UserRow, name)
            stored = row.password_hash if row is not None else _DUMMY_HASH
        try:
            _hasher.verify(stored, password)
        except (VerificationError, InvalidHashError):
            return None
        principal = self.user_principal(name) if row is not None else None
        return (principal, _stamp(stored)) if principal is not None else None

    def session_principal(self, name: str, stamp: str) -> Principal | None:
        """The user of a UI session with the roles they hold now; None if they no longer
        exist, or their password changed since the session began (``stamp`` is not theirs)."""
        with self._session() as session:
            row = session.get(UserRow, name)
            if row is None or not _same(_stamp(row.password_hash), stamp):
                return None
            grants = self._grants(session, user_key(name))
        return Principal(PrincipalKind.USER, name, frozenset(grants))

    def user_principal(self, name: str) -> Principal | None:
        """The user with the roles they hold now; None if they no longer exist."""
        with self._session() as session:
            if session.get(UserRow, name) is None:
                return None
            grants = self._grants(session, user_key(name))
        return Principal(PrincipalKind.USER, name, frozenset(grants))

    # ------------------------------------------------------------------ roles

    def grant(self, principal: str, grant: Grant) -> None:
        """Give ``grant`` to ``user:<name>`` or ``token:<id>`` (idempotent)."""
        with self._session() as session:
            self._must_exist(session, principal)
            found = session.scalars(_grant_query(principal, grant)).first()
            if found is None:
                session.add(_grant_row(principal, grant))

    def revoke(self, principal: str, grant: Grant) -> None:
        """Take ``grant`` away (idempotent)."""
        with self._session() as session:
            self._must_exist(session, principal)
            for row in session.scalars(_grant_query(principal, grant)):
                session.delete(row)

    def _must_exist(self, session: Session, principal: str) -> None:
        kind, _, name = principal.partition(":")
        row = session.get(UserRow if kind == "user" else ApiTokenRow, name)
        if row is None:
            raise NotFound(f"{'user' if kind == 'user' else 'API token'} {name} does not exist")

    def _grants(self, session: Session, principal: str) -> tuple[Grant, ...]:
        rows = session.scalars(select(RoleGrantRow).where(RoleGrantRow.principal == principal))
        return _sorted([_grant(r) for r in rows])

    # ------------------------------------------------------------------ API tokens

    def create_token(
        self, user: str | None, grants: tuple[Grant, ...] = (), description: str = ""
    ) -> tuple[TokenInfo, str]:
        """A new token for ``user`` (acting as them), or for a machine with ``grants``: its
        record, and the plaintext to show once."""
        token_id = secrets.token_hex(6)
        plaintext = f"{TOKEN_PREFIX}.{token_id}.{secrets.token_urlsafe(32)}"
        row = ApiTokenRow(
            id=token_id,
            sha256=_sha256(plaintext),
            user=user,
            description=description,
            created_at_ms=_now_ms(),
        )
        with self._session() as session:
            if user is not None and session.get(UserRow, user) is None:
                raise NotFound(f"user {user} does not exist")
            session.add(row)
            session.flush()
            for grant in set(grants) if user is None else ():
                session.add(_grant_row(token_key(token_id), grant))
        return self._token_info(token_id), plaintext

    def _token_info(self, token_id: str) -> TokenInfo:
        with self._session() as session:
            row = session.get(ApiTokenRow, token_id)
            if row is None:
                raise NotFound(f"API token {token_id} does not exist")
            return self._info(session, row)

    def _info(self, session: Session, row: ApiTokenRow) -> TokenInfo:
        key = user_key(row.user) if row.user is not None else token_key(row.id)
        return TokenInfo(
            row.id, row.user, self._grants(session, key), row.description, row.created_at_ms
        )

    def tokens(self, user: str | None = None) -> list[TokenInfo]:
        """Every API token (never a token itself), or those of ``user``."""
        query = select(ApiTokenRow).order_by(ApiTokenRow.created_at_ms, ApiTokenRow.id)
        if user is not None:
            query = query.where(ApiTokenRow.user == user)
        with self._session() as session:
            return [self._info(session, row) for row in session.scalars(query)]

    def revoke_token(self, token_id: str) -> None:
        with self._session() as session:
            row = session.get(ApiTokenRow, token_id)
            if row is None:
                raise NotFound(f"API token {token_id} does not exist")
            principal = token_key(token_id)
            session.execute(delete(RoleGrantRow).where(RoleGrantRow.principal == principal))
            session.delete(row)

    def token_principal(self, plaintext: str) -> Principal | None:
        """Who ``plaintext`` stands for, with their roles now; None for anything else."""
        match = _TOKEN.fullmatch(plaintext)
        if match is None:
            return None
        with self._session() as session:
            row = session.get(ApiTokenRow, match.group(1))
            if row is None or not hmac.compare_digest(row.sha256, _sha256(plaintext)):
                return None
            info = self._info(session, row)
        if info.user is not None:
            return Principal(PrincipalKind.USER, info.user, frozenset(info.grants))
        return Principal(PrincipalKind.TOKEN, info.id, frozenset(info.grants))

    # ------------------------------------------------------------------ topic grants

    def add_topic_grant(self, project: str, topic: str, grantee: str) -> TopicGrant:
        """Let subscriptions of ``grantee`` read ``project/topic`` (idempotent)."""
        with self._session() as session:
            row = session.scalars(_topic_grant_query(project, topic, grantee)).first()
            if row is None:
                row = TopicGrantRow(
                    project=project, topic=topic, grantee=grantee, created_at_ms=_now_ms()
                )
                session.add(row)
            return TopicGrant(row.project, row.topic, row.grantee, row.created_at_ms)

    def topic_grants(self, project: str, topic: str) -> list[TopicGrant]:
        query = (
            select(TopicGrantRow)
            .where(TopicGrantRow.project == project, TopicGrantRow.topic == topic)
            .order_by(TopicGrantRow.grantee)
        )
        with self._session() as session:
            return [
                TopicGrant(r.project, r.topic, r.grantee, r.created_at_ms)
                for r in session.scalars(query)
            ]

    def remove_topic_grant(self, project: str, topic: str, grantee: str) -> None:
        with self._session() as session:
            row = session.scalars(_topic_grant_query(project, topic, grantee)).first()
            if row is None:
                raise NotFound(f"{grantee} holds no grant on {project}/{topic}")
            session.delete(row)

    def remove_topic_grants(self, project: str, topic: str) -> None:
        """Every grant on the topic (it is deleted: a topic made later under the same name
        starts with none)."""
        with self._session() as session:
            session.execute(
                delete(TopicGrantRow).where(
                    TopicGrantRow.project == project, TopicGrantRow.topic == topic
                )
            )

    def all_topic_grants(self) -> list[TopicGrant]:
        """Every topic grant (one small table: the topic catalog reads it once a request)."""
        query = select(TopicGrantRow).order_by(
            TopicGrantRow.project, TopicGrantRow.topic, TopicGrantRow.grantee
        )
        with self._session() as session:
            return [
                TopicGrant(r.project, r.topic, r.grantee, r.created_at_ms)
                for r in session.scalars(query)
            ]

    def project_owners(self) -> dict[str, list[str]]:
        """The users who hold ``owner`` of each project, by name (machine tokens are not
        people one can ask, so they are left out)."""
        query = (
            select(RoleGrantRow)
            .where(RoleGrantRow.role == Role.OWNER.value)
            .order_by(RoleGrantRow.project, RoleGrantRow.principal)
        )
        owners: dict[str, list[str]] = {}
        with self._session() as session:
            for row in session.scalars(query):
                kind, _, name = row.principal.partition(":")
                if kind == "user":
                    owners.setdefault(row.project, []).append(name)
        return owners

    def has_topic_grant(self, project: str, topic: str, grantee: str) -> bool:
        with self._session() as session:
            return session.scalars(_topic_grant_query(project, topic, grantee)).first() is not None


def _grant_row(principal: str, grant: Grant) -> RoleGrantRow:
    return RoleGrantRow(principal=principal, role=grant.role.value, project=grant.project or "")


def _grant_query(principal: str, grant: Grant) -> Select[RoleGrantRow]:
    return select(RoleGrantRow).where(
        RoleGrantRow.principal == principal,
        RoleGrantRow.role == grant.role.value,
        RoleGrantRow.project == (grant.project or ""),
    )


def _topic_grant_query(project: str, topic: str, grantee: str) -> Select[TopicGrantRow]:
    return select(TopicGrantRow).where(
        TopicGrantRow.project == project,
        TopicGrantRow.topic == topic,
        TopicGrantRow.grantee == grantee,
    )

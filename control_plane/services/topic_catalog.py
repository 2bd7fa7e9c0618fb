"""The topic catalog: every topic a caller may subscribe to, or may ask a grant for, with what
a team needs to decide (owners, description, schema, an example, subscribers); and the grant
requests that ask a topic's owners for consent (docs/catalog.md).

Consent here is the topic grant (``control_plane.api.grants``): subscriptions of project A
read topic ``B/t`` only once an owner of B granted ``t`` to A, and only an owner of A creates
A's subscriptions. So the catalog shows a caller:

- ``own``: the topics of every project they hold a role in (an admin: every topic);
- ``granted``: topics granted to a project they hold a role in;
- ``requestable``: every other topic, when they own a project that could ask for it. A
  caller who owns no project (a viewer only) cannot ask, so sees only the first two kinds.

Each entry says which of the caller's projects may subscribe (``subscribe_as``) and which
could ask (``request_as``). Topic names, descriptions, schemas and owners are shown to those
who could ask, since without them there is nothing to ask for; messages are never shown.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from asyncio import to_thread
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from core.errors import AlreadyExists, Forbidden, Malformed, NotFound, ValidationFailed
from core.grant_requests import GrantRequest, RequestState
from core.model import Topic, utcnow
from core.principals import Need, Principal, Role
from metastore.catalog import Catalog
from reports.principals import PrincipalStore


class Access(StrEnum):
    OWN = "own"
    GRANTED = "granted"
    REQUESTABLE = "requestable"


class SchemaRef(BaseModel):
    version: int
    active: bool
    compatibility: str
    link: str = Field(description="the version in the admin API (viewers of the project)")
    document: dict[str, Any] | None = Field(
        default=None, description="the JSON Schema itself (in the entry of one topic only)"
    )


class CatalogEntry(BaseModel):
    project: str
    topic: str
    description: str
    grouped: bool
    created_at: datetime
    owners: list[str] = Field(description="users holding owner of the topic's project")
    access: Access
    subscribe_as: list[str] = Field(description="the caller's projects that may subscribe")
    request_as: list[str] = Field(description="the caller's projects that may ask a grant")
    pending_requests: list[str] = Field(
        description="grantees with a pending request the caller may see: all of them for "
        "the topic's owners, else the caller's own"
    )
    your_requests: list[GrantRequest] = Field(
        default_factory=list,
        description="the requests of the caller's projects in any state (a refusal and its "
        "note included); empty for the topic's owners, who list them all",
    )
    schema_: SchemaRef | None = Field(
        default=None, alias="schema", serialization_alias="schema", description="null: none"
    )
    example: Any = Field(default=None, description="the schema's first `examples` value")
    subscribers: int = Field(description="subscriptions (of any project) reading the topic")


class CatalogPage(BaseModel):
    items: list[CatalogEntry]
    next_cursor: str | None = Field(description="null on the last page")


@dataclass(frozen=True)
class Visible:
    """A topic the caller may see, and what they may do with it."""

    project: str
    topic: str
    access: Access
    subscribe_as: tuple[str, ...]
    request_as: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.project}/{self.topic}"


def access_of(
    principal: Principal,
    project: str,
    topic: str,
    grantees: frozenset[str],
    existing: frozenset[str],
) -> Visible | None:
    """The one rule of the catalog's visibility (see the module's docstring); None: hidden.
    ``grantees`` hold a grant on the topic; ``existing`` are the projects that exist."""
    if principal.is_admin:
        return Visible(project, topic, Access.OWN, tuple(sorted({project} | grantees)), ())
    held = principal.projects() & existing
    owned = frozenset(p for p in held if principal.role_in(p) is Role.OWNER)
    readers = {project} | grantees
    subscribe_as = tuple(sorted(owned & readers))
    request_as = tuple(sorted(owned - readers))
    if project in held:
        return Visible(project, topic, Access.OWN, subscribe_as, request_as)
    if grantees & held:
        return Visible(project, topic, Access.GRANTED, subscribe_as, request_as)
    if owned:
        return Visible(project, topic, Access.REQUESTABLE, (), request_as)
    return None


def encode_cursor(key: str) -> str:
    return base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str:
    if not cursor:
        return ""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        text = ""
    if text.count("/") != 1:
        raise Malformed("cursor: not a cursor this API gave; start again without one")
    return text


def _who(principal: Principal) -> str:
    return principal.label


class TopicCatalog:
    """The catalog over the metastore's topics and the relational store's grants and roles
    (a synchronous store: read in a thread)."""

    def __init__(self, catalog: Catalog, principals: PrincipalStore) -> None:
        self.catalog = catalog
        self.principals = principals

    # ------------------------------------------------------------------ reading

    async def visible(self, principal: Principal) -> list[Visible]:
        """Every topic ``principal`` may see, sorted by project and topic."""
        projects = await self.catalog.list_projects()
        topic_lists = await asyncio.gather(*(self.catalog.list_topics(p) for p in projects))
        grants = await to_thread(self.principals.all_topic_grants)
        grantees: dict[tuple[str, str], set[str]] = {}
        for grant in grants:
            grantees.setdefault((grant.project, grant.topic), set()).add(grant.grantee)
        existing = frozenset(projects)
        found = []
        for project, topics in zip(projects, topic_lists, strict=True):
            for topic in topics:
                given = frozenset(grantees.get((project, topic), ()))
                seen = access_of(principal, project, topic, given, existing)
                if seen is not None:
                    found.append(seen)
        return sorted(found, key=lambda v: (v.project, v.topic))

    async def page(
        self, principal: Principal, query: str, cursor: str | None, limit: int
    ) -> CatalogPage:
        """One page of the catalog after ``cursor``, matching ``query`` (case-insensitive,
        in ``project/topic``, the description or an owner's name) when one is given."""
        after = decode_cursor(cursor)
        shown = [v for v in await self.visible(principal) if v.key > after]
        owners = await to_thread(self.principals.project_owners)
        needle = query.strip().lower()
        chosen: list[tuple[Visible, Topic]] = []
        if needle:
            topics = await self._describe(shown)
            for seen, topic in zip(shown, topics, strict=True):
                if topic is not None and _matches(needle, seen, topic, owners):
                    chosen.append((seen, topic))
                    if len(chosen) > limit:
                        break
        else:
            wanted = shown[: limit + 1]
            topics = await self._describe(wanted)
            chosen = [(s, t) for s, t in zip(wanted, topics, strict=True) if t is not None]
        more = len(chosen) > limit
        chosen = chosen[:limit]
        items = await asyncio.gather(
            *(self._entry(principal, s, t, owners, full=False) for s, t in chosen)
        )
        last = chosen[-1][0].key if more and chosen else None
        return CatalogPage(items=list(items), next_cursor=encode_cursor(last) if last else None)

    async def entry(self, principal: Principal, project: str, topic: str) -> CatalogEntry:
        """One topic's entry with its schema document; 404 when the caller may not see it,
        the same answer as for a topic that does not exist."""
        seen = await self._visible_one(principal, project, topic)
        described = await self.catalog.describe_topic(project, topic)
        owners = await to_thread(self.principals.project_owners)
        return await self._entry(principal, seen, described, owners, full=True)

    async def _visible_one(self, principal: Principal, project: str, topic: str) -> Visible:
        projects = frozenset(await self.catalog.list_projects())
        exists = project in projects and topic in await self.catalog.list_topics(project)
        grants = await to_thread(self.principals.topic_grants, project, topic)
        given = frozenset(g.grantee for g in grants)
        seen = access_of(principal, project, topic, given, projects)
        if not exists or seen is None:
            raise NotFound(f"topic {project}/{topic} is not in your catalog (or does not exist)")
        return seen

    async def _describe(self, shown: list[Visible]) -> list[Topic | None]:
        async def one(seen: Visible) -> Topic | None:
            try:
                return await self.catalog.describe_topic(seen.project, seen.topic)
            except NotFound:  # deleted since it was listed
                return None

        return list(await asyncio.gather(*(one(s) for s in shown)))

    async def _entry(
        self,
        principal: Principal,
        seen: Visible,
        topic: Topic,
        owners: dict[str, list[str]],
        *,
        full: bool,
    ) -> CatalogEntry:
        p, t = seen.project, seen.topic
        schema, example = await self._schema(p, t, full=full)
        subscribers, requests = await asyncio.gather(
            self.catalog.subscribers(p, t), self.catalog.list_grant_requests(p, t)
        )
        decides = principal.may(Need.OWNER, p)
        pending = [
            r.grantee
            for r in requests
            if r.state is RequestState.PENDING and (decides or principal.may(Need.OWNER, r.grantee))
        ]
        yours = [r for r in requests if not decides and principal.may(Need.OWNER, r.grantee)]
        return CatalogEntry(
            project=p,
            topic=t,
            description=topic.description,
            grouped=topic.grouped,
            created_at=topic.created_at,
            owners=owners.get(p, []),
            access=seen.access,
            subscribe_as=list(seen.subscribe_as),
            request_as=[g for g in seen.request_as if g not in pending],
            pending_requests=pending,
            your_requests=yours,
            schema=schema,
            example=example,
            subscribers=len(subscribers),
        )

    async def _schema(
        self, project: str, topic: str, *, full: bool
    ) -> tuple[SchemaRef | None, Any]:
        """The latest schema version (a link; the document when ``full``) and the first of
        its ``examples``, or (None, None) for a topic that never had a schema."""
        found = await self.catalog.get_schema_state(project, topic)
        if found is None:
            return None, None
        state, _ = found
        try:
            version = await self.catalog.get_schema_version(project, topic, state.latest)
        except NotFound:
            return None, None
        examples = version.schema_.get("examples")
        example = examples[0] if isinstance(examples, list) and examples else None
        ref = SchemaRef(
            version=state.latest,
            active=state.active,
            compatibility=state.compatibility.value,
            link=f"/v1/projects/{project}/topics/{topic}/schema/versions/{state.latest}",
            document=version.schema_ if full else None,
        )
        return ref, example

    # ------------------------------------------------------------------ grant requests

    async def request_grant(
        self, principal: Principal, project: str, topic: str, grantee: str, reason: str
    ) -> GrantRequest:
        """Ask the owners of ``project`` to grant ``topic`` to ``grantee``, as an owner of
        ``grantee``. A decided request of the same grantee is replaced; a pending one or a
        grant already held is a 409."""
        await self._visible_one(principal, project, topic)
        if grantee == project:
            raise _invalid("project", "a project's own topics need no grant")
        if grantee not in await self.catalog.list_projects():
            raise _invalid("project", f"project {grantee} does not exist")
        if not principal.may(Need.OWNER, grantee):
            raise Forbidden(
                f"a grant request is made by an owner of the project that would subscribe; "
                f"{principal.label} holds no owner of {grantee}"
            )
        if await to_thread(self.principals.has_topic_grant, project, topic, grantee):
            raise AlreadyExists(f"{grantee} already holds a grant on {project}/{topic}")
        version = -1
        try:
            current = await self.catalog.get_grant_request(project, topic, grantee)
        except NotFound:
            current = None
        if current is not None:
            if current.state is RequestState.PENDING:
                raise AlreadyExists(
                    f"a request of {grantee} for {project}/{topic} is pending since "
                    f"{current.requested_at.isoformat(timespec='seconds')}"
                )
            version = current.version
        made = GrantRequest(
            project=project,
            topic=topic,
            grantee=grantee,
            reason=reason,
            requested_by=_who(principal),
            requested_at=utcnow(),
            version=version,
        )
        return await self.catalog.put_grant_request(made)

    async def requests(
        self, project: str, topic: str, state: RequestState | None
    ) -> list[GrantRequest]:
        await self.catalog.describe_topic(project, topic)  # 404 names the topic
        found = await self.catalog.list_grant_requests(project, topic)
        return [r for r in found if state is None or r.state is state]

    async def decide(
        self,
        principal: Principal,
        project: str,
        topic: str,
        grantee: str,
        *,
        approve: bool,
        note: str,
    ) -> GrantRequest:
        """Approve (the topic grant is made first, so a retried approval completes) or
        refuse a pending request; 409 if it was decided already."""
        current = await self.catalog.get_grant_request(project, topic, grantee)
        if current.state is not RequestState.PENDING:
            raise AlreadyExists(
                f"the request of {grantee} for {project}/{topic} was {current.state.value} "
                f"by {current.decided_by}; it can be made again"
            )
        if approve:
            if grantee not in await self.catalog.list_projects():
                raise _invalid("grantee", f"project {grantee} no longer exists")
            await to_thread(self.principals.add_topic_grant, project, topic, grantee)
        decided = current.model_copy(
            update={
                "state": RequestState.APPROVED if approve else RequestState.REFUSED,
                "decided_by": _who(principal),
                "decided_at": utcnow(),
                "note": note,
            }
        )
        return await self.catalog.put_grant_request(decided)


def _matches(needle: str, seen: Visible, topic: Topic, owners: dict[str, list[str]]) -> bool:
    texts = [seen.key, topic.description, *owners.get(seen.project, [])]
    return any(needle in text.lower() for text in texts)


def _invalid(field: str, problem: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field}: {problem}", details={"fields": [{"field": field, "problem": problem}]}
    )

"""The catalog: projects, topics, segments, pointers and subscriptions on a ``MetaStore``.

It maps the domain model (``core.model``) onto the paths of :mod:`.paths` and keeps
the invariants that span several nodes in one transaction: a topic is created together with
its first segment and its produce pointer; a subscription together with its consume pointer
and its marker under the topic it reads (so deleting a topic can see who still reads it).
Every update is a compare-and-set on the version the caller read.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from pydantic import BaseModel

from core.errors import AlreadyExists, InUse, NotFound, VersionConflict
from core.grant_requests import GrantRequest
from core.model import Pointer, ProduceToken, Project, Segment, Subscription, Topic
from core.quotas import CountQuota
from core.schemas import SchemaState, SchemaVersion
from core.signing_keys import KeySet

from . import paths
from .documents import read_versioned
from .protocol import Check, Create, Delete, MetaStore, Node, Op, Update
from .quotas import QuotaStore

_TOPIC_ONLY = {"segments", "produce_pointer", "version"}
_SUB_ONLY = {"consume_pointer", "version"}


def _dump(model: BaseModel, exclude: set[str] | None = None) -> bytes:
    return model.model_dump_json(exclude=exclude or {"version"}).encode()


def _pointer_bytes(segment_id: int) -> bytes:
    return json.dumps({"segment_id": segment_id}).encode()


def _segments_moved(project: str, topic: str) -> Update:
    """Rewrites the topic's segments node (its data stays empty; its version moves), in the
    transaction of a change to a segment record that moves neither the topic's node nor its
    produce pointer: a reader watching those three (the workers' topic cache) sees every
    change to the timeline without reading it again on a timer."""
    return Update(paths.segments(project, topic), b"", -1)


def _pointer(node: Node | None) -> Pointer | None:
    if node is None:
        return None
    return Pointer(segment_id=json.loads(node.data)["segment_id"], version=node.version)


class Catalog:
    """Typed access to the metadata of httpbus, on any ``MetaStore``."""

    def __init__(self, store: MetaStore) -> None:
        self.store = store
        self.quotas = QuotaStore(store)

    async def _require(self, path: str, what: str) -> Node:
        node = await self.store.get(path)
        if node is None:
            raise NotFound(f"{what} does not exist")
        return node

    # ------------------------------------------------------------ projects
    async def create_project(self, project: Project) -> Project:
        try:
            node = await self.store.create(paths.project(project.name), _dump(project))
        except AlreadyExists:
            raise AlreadyExists(f"project {project.name!r} already exists") from None
        return project.model_copy(update={"version": node.version})

    async def get_project(self, name: str) -> Project:
        node = await self._require(paths.project(name), f"project {name!r}")
        return Project.model_validate_json(node.data).model_copy(update={"version": node.version})

    async def describe_projects(self, names: Sequence[str]) -> list[Project]:
        """Many projects in one bulk read; a name that does not exist is left out."""
        nodes = await self.store.get_many([paths.project(n) for n in names])
        return [Project.model_validate_json(n.data) for n in nodes if n is not None]

    async def list_projects(self) -> list[str]:
        return await self.store.children(paths.PROJECTS)

    async def update_project(self, project: Project) -> Project:
        node = await self.store.update(
            paths.project(project.name), _dump(project), expected_version=project.version
        )
        return project.model_copy(update={"version": node.version})

    async def delete_project(self, name: str) -> None:
        await self.get_project(name)
        if await self.list_topics(name) or await self.list_subscriptions(name):
            raise InUse(f"project {name!r} still has topics or subscriptions; delete them first")
        await self.store.delete(paths.project(name), recursive=True)

    # ------------------------------------------------------------ topics
    async def create_topic(self, topic: Topic, first: Segment) -> Topic:
        """Create ``topic`` with ``first`` as its active segment, in one transaction (and
        within the project's topic quota: ``metastore.quotas``)."""
        await self.get_project(topic.project)
        p, t = topic.project, topic.name

        async def attempt() -> None:
            if await self.store.get(paths.topic(p, t)) is not None:
                raise AlreadyExists(f"topic {p}/{t} already exists")
            ops: list[Op] = [
                *await self.quotas.count_guard(p, CountQuota.TOPICS),
                Create(paths.topic(p, t), _dump(topic, _TOPIC_ONLY)),
                Create(paths.segments(p, t), b""),
                Create(paths.segment(p, t, first.id), _dump(first)),
                Create(paths.produce_pointer(p, t), _pointer_bytes(first.id)),
            ]
            try:
                await self.store.transaction(ops)
            except AlreadyExists:
                raise AlreadyExists(f"topic {p}/{t} already exists") from None

        await self.quotas.guarded(attempt)
        return await self.get_topic(p, t)

    async def get_topic(self, project: str, name: str) -> Topic:
        # Three independent reads, in parallel: a cutover's pause waits on this read.
        node, segments, pointer_node = await asyncio.gather(
            self._require(paths.topic(project, name), f"topic {project}/{name}"),
            self.list_segments(project, name),
            self.store.get(paths.produce_pointer(project, name)),
        )
        pointer = _pointer(pointer_node)
        return Topic.model_validate_json(node.data).model_copy(
            update={
                "version": node.version,
                "segments": tuple(segments),
                "produce_pointer": pointer,
            }
        )

    async def list_topics(self, project: str) -> list[str]:
        return await self.store.children(paths.topics(project))

    async def update_topic(self, topic: Topic) -> Topic:
        """Replace the topic's own settings (not its segments or pointer) by CAS."""
        await self.store.update(
            paths.topic(topic.project, topic.name),
            _dump(topic, _TOPIC_ONLY),
            expected_version=topic.version,
        )
        return await self.get_topic(topic.project, topic.name)

    async def subscribers(self, project: str, topic: str) -> list[tuple[str, str]]:
        """``(project, subscription)`` of every subscription that reads this topic."""
        names = await self.store.children(paths.topic_subscribers(project, topic))
        return [(n.split(":", 1)[0], n.split(":", 1)[1]) for n in names]

    async def delete_topic(self, project: str, name: str, *, force: bool = False) -> Topic:
        """Delete the topic's metadata and return it (the caller deletes its storage)."""
        topic = await self.get_topic(project, name)
        subs = await self.subscribers(project, name)
        if subs and not force:
            listed = ", ".join(f"{p}/{s}" for p, s in subs)
            raise InUse(
                f"topic {project}/{name} has subscriptions ({listed}); delete them "
                "first or pass force=true to delete them too",
                details={"subscriptions": [f"{p}/{s}" for p, s in subs]},
            )
        for sub_project, sub in subs:
            await self.delete_subscription(sub_project, sub)
        await self.store.delete(paths.topic(project, name), recursive=True)
        return topic

    async def describe_topic(self, project: str, name: str) -> Topic:
        """The topic's own settings (description, grouped…) in one read, without its
        segments and pointer: what a listing of many topics needs."""
        node = await self._require(paths.topic(project, name), f"topic {project}/{name}")
        return Topic.model_validate_json(node.data).model_copy(update={"version": node.version})

    async def get_topics(self, project: str, names: Sequence[str]) -> list[Topic]:
        """:meth:`get_topic` of many, in bulk: the topics' nodes and produce pointers in one
        ``get_many``, their segments' names, then every segment in one ``get_many`` (a page
        of a list). A name that does not exist (deleted since it was listed) is left out."""
        pairs = [(paths.topic(project, n), paths.produce_pointer(project, n)) for n in names]
        nodes = await self.store.get_many([path for pair in pairs for path in pair])
        children = await self.store.children_many([paths.segments(project, n) for n in names])
        wanted = [
            (i, f"{paths.segments(project, n)}/{c}")
            for i, (n, cs) in enumerate(zip(names, children, strict=True))
            for c in cs
        ]
        found = await self.store.get_many([where for _, where in wanted])
        segments: list[list[Segment]] = [[] for _ in names]
        for (i, _), node in zip(wanted, found, strict=True):
            if node is not None:
                segments[i].append(Segment.model_validate_json(node.data))
        topics = []
        for i in range(len(names)):
            node, pointer = nodes[2 * i], nodes[2 * i + 1]
            if node is None:
                continue
            update = {
                "version": node.version,
                "segments": tuple(sorted(segments[i], key=lambda s: s.id)),
                "produce_pointer": _pointer(pointer),
            }
            topics.append(Topic.model_validate_json(node.data).model_copy(update=update))
        return topics

    async def describe_topics(self, project: str, names: Sequence[str]) -> list[Topic]:
        """:meth:`describe_topic` of many in one bulk read (``MetaStore.get_many``); a name
        that does not exist (deleted since it was listed) is left out."""
        nodes = await self.store.get_many([paths.topic(project, n) for n in names])
        return [
            Topic.model_validate_json(n.data).model_copy(update={"version": n.version})
            for n in nodes
            if n is not None
        ]

    # ------------------------------------------------------------ grant requests
    async def get_grant_request(self, project: str, topic: str, grantee: str) -> GrantRequest:
        node = await self._require(
            paths.grant_request(project, topic, grantee),
            f"a request of {grantee} for topic {project}/{topic}",
        )
        found = GrantRequest.model_validate_json(node.data)
        return found.model_copy(update={"version": node.version})

    async def list_grant_requests(self, project: str, topic: str) -> list[GrantRequest]:
        """Every request on the topic, by grantee (a topic deleted meanwhile: none)."""
        names = await self.store.children(paths.grant_requests(project, topic))
        found = await asyncio.gather(
            *(self._grant_request_or_none(project, topic, n) for n in names)
        )
        return [r for r in found if r is not None]

    async def _grant_request_or_none(
        self, project: str, topic: str, grantee: str
    ) -> GrantRequest | None:
        try:
            return await self.get_grant_request(project, topic, grantee)
        except NotFound:
            return None

    async def put_grant_request(self, request: GrantRequest) -> GrantRequest:
        """Create the request (``version`` -1) or replace the one read at ``version`` (CAS),
        in a transaction that checks the topic still exists, so a request never outlives
        its topic nor makes one appear."""
        p, t, g = request.project, request.topic, request.grantee
        path = paths.grant_request(p, t, g)
        data = _dump(request)
        if request.version >= 0:
            await self.store.update(path, data, expected_version=request.version)
            return await self.get_grant_request(p, t, g)
        parent = paths.grant_requests(p, t)
        ops: list[Op] = [Check(paths.topic(p, t), -1)]
        if await self.store.get(parent) is None:
            ops.append(Create(parent, b""))
        ops.append(Create(path, data))
        try:
            await self.store.transaction(ops)
        except NotFound:
            raise NotFound(f"topic {p}/{t} does not exist") from None
        except AlreadyExists:
            if await self.store.get(path) is not None:
                raise AlreadyExists(f"a request of {g} for topic {p}/{t} exists") from None
            await self.store.transaction([Check(paths.topic(p, t), -1), Create(path, data)])
        return await self.get_grant_request(p, t, g)

    # ------------------------------------------------------------ topic schemas
    async def get_schema_state(self, project: str, topic: str) -> tuple[SchemaState, int] | None:
        """The topic's schema state and its node version, or None if it never had one."""
        return await read_versioned(self.store, paths.topic_schema(project, topic), SchemaState)

    async def get_schema_version(self, project: str, topic: str, version: int) -> SchemaVersion:
        node = await self._require(
            paths.schema_version(project, topic, version),
            f"schema version {version} of topic {project}/{topic}",
        )
        return SchemaVersion.model_validate_json(node.data)

    async def list_schema_versions(self, project: str, topic: str) -> list[int]:
        return [int(n) for n in await self.store.children(paths.topic_schema(project, topic))]

    async def put_schema_version(
        self, project: str, topic: str, state: SchemaState, version: SchemaVersion, read_at: int
    ) -> None:
        """Write ``version`` and the new ``state`` in one transaction: a compare-and-set on
        the state node's version ``read_at`` (-1: it did not exist), so two writers that
        checked against the same previous version never both win."""
        state_path = paths.topic_schema(project, topic)
        ops: list[Op] = [Check(paths.topic(project, topic), -1)] if read_at < 0 else []
        ops += [
            Create(state_path, _dump(state, set()))
            if read_at < 0
            else Update(state_path, _dump(state, set()), read_at),
            Create(paths.schema_version(project, topic, version.version), version.dump()),
        ]
        try:
            await self.store.transaction(ops)
        except (AlreadyExists, VersionConflict):
            raise VersionConflict(
                f"the schema of {project}/{topic} changed meanwhile; read it and try again"
            ) from None

    async def set_schema_state(
        self, project: str, topic: str, state: SchemaState, read_at: int
    ) -> None:
        """Replace the state (``active`` off removes validation) by CAS on ``read_at``."""
        await self.store.update(
            paths.topic_schema(project, topic), _dump(state, set()), expected_version=read_at
        )

    # ------------------------------------------------------------ segments
    async def list_segments(self, project: str, topic: str) -> list[Segment]:
        parent = paths.segments(project, topic)
        children = await self.store.children(parent)
        nodes = await asyncio.gather(*(self.store.get(f"{parent}/{c}") for c in children))
        out = [Segment.model_validate_json(n.data) for n in nodes if n is not None]
        return sorted(out, key=lambda s: s.id)

    async def get_segment(self, project: str, topic: str, segment_id: int) -> Segment:
        """One segment's record, read now (never from a cache)."""
        node = await self._require(
            paths.segment(project, topic, segment_id), f"segment {segment_id} of {project}/{topic}"
        )
        return Segment.model_validate_json(node.data)

    async def add_segment(self, project: str, topic: str, segment: Segment) -> None:
        """Add a (PENDING) segment to the timeline; its id must be new."""
        try:
            await self.store.transaction(
                [
                    Create(paths.segment(project, topic, segment.id), _dump(segment)),
                    _segments_moved(project, topic),
                ]
            )
        except AlreadyExists:
            raise AlreadyExists(
                f"segment {segment.id} of {project}/{topic} exists; segment ids are never reused"
            ) from None

    async def commit_segment_switch(
        self, topic: Topic, sealed: Segment, active: Segment, extra: Sequence[Op] = ()
    ) -> Topic:
        """In one transaction: record ``sealed`` (state SEALED, end positions), make
        ``active`` ACTIVE and move the produce pointer to it — a compare-and-set on the
        pointer version ``topic`` was read at, so two coordinators never both switch.
        ``extra`` ops join the same transaction (the cutover records its commit there)."""
        if topic.produce_pointer is None or topic.produce_pointer.segment_id != sealed.id:
            raise VersionConflict(
                f"{topic.project}/{topic.name} no longer writes segment {sealed.id}"
            )
        p, t = topic.project, topic.name
        old, new = await asyncio.gather(
            self._require(paths.segment(p, t, sealed.id), f"segment {sealed.id}"),
            self._require(paths.segment(p, t, active.id), f"segment {active.id}"),
        )
        ops: list[Op] = [
            Update(paths.segment(p, t, sealed.id), _dump(sealed), old.version),
            Update(paths.segment(p, t, active.id), _dump(active), new.version),
            Update(
                paths.produce_pointer(p, t),
                _pointer_bytes(active.id),
                topic.produce_pointer.version,
            ),
            *extra,
        ]
        await self.store.transaction(ops)
        return await self.get_topic(p, t)

    async def update_segment(self, project: str, topic: str, segment: Segment) -> None:
        """Replace a segment's record (retiring it, say); its id and storage never change."""
        node = await self._require(
            paths.segment(project, topic, segment.id), f"segment {segment.id}"
        )
        await self.store.transaction(
            [
                Update(paths.segment(project, topic, segment.id), _dump(segment), node.version),
                _segments_moved(project, topic),
            ]
        )

    # ------------------------------------------------------------ subscriptions
    async def create_subscription(self, sub: Subscription) -> Subscription:
        """Create ``sub`` reading its topic from the segment of its start point (the topic's
        active segment if it has none, ``_first_needed``), atomically
        with its marker under the topic (checked against the topic's version), within the
        project's subscription quota (``metastore.quotas``)."""
        await self.get_project(sub.project)
        path = paths.subscription(sub.project, sub.name)
        marker = paths.topic_subscriber(sub.topic_project, sub.topic, sub.project, sub.name)

        async def attempt() -> None:
            topic = await self.get_topic(sub.topic_project, sub.topic)
            if topic.produce_pointer is None:
                raise NotFound(f"topic {sub.topic_project}/{sub.topic} has no active segment")
            if await self.store.get(path) is not None:
                raise AlreadyExists(f"subscription {sub.project}/{sub.name} already exists")
            ops: list[Op] = [
                *await self.quotas.count_guard(sub.project, CountQuota.SUBSCRIPTIONS),
                Check(paths.topic(topic.project, topic.name), topic.version),
                Create(path, _dump(sub, _SUB_ONLY)),
                Create(
                    paths.consume_pointer(sub.project, sub.name),
                    _pointer_bytes(_first_needed(topic, sub)),
                ),
                Create(marker, b""),
            ]
            await self._ensure(paths.topic_subscribers(sub.topic_project, sub.topic))
            try:
                await self.store.transaction(ops)
            except AlreadyExists:
                raise AlreadyExists(
                    f"subscription {sub.project}/{sub.name} already exists"
                ) from None

        await self.quotas.guarded(attempt)
        return await self.get_subscription(sub.project, sub.name)

    async def _ensure(self, path: str) -> None:
        if await self.store.get(path) is None:
            try:
                await self.store.create(path, b"")
            except AlreadyExists:
                pass

    async def get_subscription(self, project: str, name: str) -> Subscription:
        path = paths.subscription(project, name)
        node = await self._require(path, f"subscription {project}/{name}")
        pointer = _pointer(await self.store.get(paths.consume_pointer(project, name)))
        return Subscription.model_validate_json(node.data).model_copy(
            update={"version": node.version, "consume_pointer": pointer}
        )

    async def get_subscriptions(self, project: str, names: Sequence[str]) -> list[Subscription]:
        """:meth:`get_subscription` of many: their nodes and consume pointers in one
        ``get_many`` (a page of a list); a name that does not exist is left out."""
        pairs = [(paths.subscription(project, n), paths.consume_pointer(project, n)) for n in names]
        nodes = await self.store.get_many([path for pair in pairs for path in pair])
        return [
            Subscription.model_validate_json(node.data).model_copy(
                update={"version": node.version, "consume_pointer": _pointer(pointer)}
            )
            for node, pointer in zip(nodes[::2], nodes[1::2], strict=True)
            if node is not None
        ]

    async def describe_subscriptions(
        self, project: str, names: Sequence[str]
    ) -> list[Subscription]:
        """The settings of many subscriptions in one bulk read, without their consume
        pointers (what a search of a list needs); a name that does not exist is left out."""
        nodes = await self.store.get_many([paths.subscription(project, n) for n in names])
        return [Subscription.model_validate_json(n.data) for n in nodes if n is not None]

    async def subscription_shards(self, project: str, name: str) -> int:
        """The subscription's shard count, fixed at its creation: one read, no model (the
        assignment leader asks it of 10^5 subscriptions when it starts)."""
        path = paths.subscription(project, name)
        node = await self._require(path, f"subscription {project}/{name}")
        count = json.loads(node.data).get("shards", 1)
        return count if isinstance(count, int) and count >= 1 else 1

    async def list_subscriptions(self, project: str) -> list[str]:
        return await self.store.children(paths.subscriptions(project))

    async def update_subscription(self, sub: Subscription) -> Subscription:
        """Replace the subscription's settings by CAS; its topic cannot change."""
        current = await self.get_subscription(sub.project, sub.name)
        if (current.topic_project, current.topic) != (sub.topic_project, sub.topic):
            raise InUse("a subscription's topic cannot change; create a new subscription")
        await self.store.update(
            paths.subscription(sub.project, sub.name),
            _dump(sub, _SUB_ONLY),
            expected_version=sub.version,
        )
        return await self.get_subscription(sub.project, sub.name)

    # ------------------------------------------------------------ JWT signing keys
    async def get_signing_keys(self) -> tuple[KeySet, int] | None:
        """The key set delivery JWTs are signed with and its version; None before the
        first key was made."""
        return await read_versioned(self.store, paths.SIGNING_KEYS, KeySet)

    async def put_signing_keys(self, keys: KeySet, version: int | None) -> None:
        """Store ``keys``: created when ``version`` is None, else a compare-and-set
        (``VersionConflict`` / ``AlreadyExists`` when another writer was first)."""
        data = keys.model_dump_json().encode()
        if version is None:
            await self.store.create(paths.SIGNING_KEYS, data)
        else:
            await self.store.update(paths.SIGNING_KEYS, data, expected_version=version)

    async def delete_subscription(self, project: str, name: str) -> None:
        sub = await self.get_subscription(project, name)
        marker = paths.topic_subscriber(sub.topic_project, sub.topic, project, name)
        ops: list[Op] = [
            Delete(paths.consume_pointer(project, name)),
            Delete(paths.subscription(project, name), sub.version),
        ]
        if await self.store.get(marker) is not None:
            ops.append(Delete(marker))
        await self.store.transaction(ops)

    # ------------------------------------------------------------ produce tokens
    async def create_token(self, token: ProduceToken) -> ProduceToken:
        await self.get_project(token.project)
        await self._ensure(paths.tokens(token.project))
        await self.store.create(paths.token(token.project, token.id), _dump(token))
        return token

    async def get_token(self, project: str, token_id: str) -> ProduceToken:
        node = await self._require(paths.token(project, token_id), f"token {token_id}")
        return ProduceToken.model_validate_json(node.data)

    async def list_tokens(self, project: str) -> list[ProduceToken]:
        await self.get_project(project)
        ids = await self.store.children(paths.tokens(project))
        return [await self.get_token(project, i) for i in ids]

    async def delete_token(self, project: str, token_id: str) -> None:
        await self.get_token(project, token_id)
        await self.store.delete(paths.token(project, token_id))

    async def move_consume_pointer(self, sub: Subscription, segment_id: int) -> Pointer:
        """Advance ``sub``'s consume pointer by CAS on the version it was read at."""
        if sub.consume_pointer is None:
            raise NotFound(f"subscription {sub.project}/{sub.name} has no consume pointer")
        ops: list[Op] = [
            Update(
                paths.consume_pointer(sub.project, sub.name),
                _pointer_bytes(segment_id),
                sub.consume_pointer.version,
            )
        ]
        await self.store.transaction(ops)
        pointer = _pointer(await self.store.get(paths.consume_pointer(sub.project, sub.name)))
        assert pointer is not None
        return pointer


def _first_needed(topic: Topic, sub: Subscription) -> int:
    """The segment a new subscription reads first: its start point's (``StartPoint``,
    resolved by the control plane), else the topic's active segment."""
    if sub.start is not None:
        if topic.segment(sub.start.segment) is None:
            raise NotFound(f"segment {sub.start.segment} of {topic.project}/{topic.name}")
        return sub.start.segment
    assert topic.produce_pointer is not None
    return topic.produce_pointer.segment_id

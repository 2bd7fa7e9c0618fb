"""What the admin API does, apart from HTTP: validation across entities, storage and metadata
kept consistent (no half-created object survives a failure)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import secrets
import uuid
from datetime import datetime

from control_plane.services.inputs import SubscriptionCreate, TopicCreate
from control_plane.services.signing_keys import SigningKeys
from control_plane.settings import ControlPlaneSettings
from core.archive import ArchiveSpec, ArchiveStorage, target_of
from core.endpoint_auth import JwtAuth, OAuth2ClientCredentials
from core.endpoint_auth import refuse_masked as refuse_masked_auth
from core.endpoint_policy import EndpointPolicy
from core.errors import (
    HttpbusError,
    MetaStoreUnavailable,
    NotFound,
    SecretInForce,
    ValidationFailed,
    VersionConflict,
)
from core.model import (
    Failover,
    Notifications,
    Project,
    Segment,
    SegmentState,
    StartAt,
    StartPoint,
    Subscription,
    Topic,
    utcnow,
)
from core.secret_headers import refuse_masked
from core.signing_keys import JwtSigning
from metastore.catalog import Catalog
from metastore.protocol import MetaStore
from segments.config import ClusterConfig, is_read_only
from segments.positions import locate
from segments.protocol import SegmentStore

log = logging.getLogger(__name__)


def new_signing_secret() -> str:
    """A Standard Webhooks secret: ``whsec_`` and 32 random bytes in base64."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def rotate(
    sub: Subscription, secret: str, overlap_s: float, *, field: str, at: datetime | None = None
) -> Subscription:
    """:meth:`Subscription.rotated` at ``at`` (now), a secret in force refused with a 422
    naming the request's ``field``."""
    try:
        return sub.rotated(secret, at or utcnow(), overlap_s)
    except SecretInForce as exc:
        problem = exc.message
        raise ValidationFailed(
            f"{field}: {problem}", details={"fields": [{"field": field, "problem": problem}]}
        ) from None


def _first_storage_topic(config: ClusterConfig, cluster: str, body: TopicCreate) -> str | None:
    """The adopted topic of an external first segment (docs/migrating.md), or None for a new
    storage topic; 422 naming the field when the request and the cluster disagree."""
    read_only = is_read_only(config)
    if read_only == (body.external_topic is not None):
        return body.external_topic
    problem = (
        f"cluster {cluster!r} is read_only: name the existing topic to adopt"
        if read_only
        else f"only a read_only cluster's topic can be adopted, not one of {cluster!r}"
    )
    raise ValidationFailed(
        f"external_topic: {problem}",
        details={"fields": [{"field": "external_topic", "problem": problem}]},
    )


async def drop_storage(store: SegmentStore, storage_topic: str) -> None:
    """Delete a storage topic whose metadata is gone or never came to be: the metadata is
    the truth, so a failure leaves an orphan that is only logged."""
    try:
        await store.delete_topic(storage_topic)
    except NotFound:
        pass
    except HttpbusError as exc:
        log.warning("could not delete storage topic %s: %s", storage_topic, exc)


class Admin:
    """Topics and subscriptions on top of the catalog and the storage clusters."""

    def __init__(
        self,
        catalog: Catalog,
        clusters: dict[str, ClusterConfig],
        stores: dict[str, SegmentStore],
        default_cluster: str,
        prefix: str,
        endpoint_policy: EndpointPolicy | None = None,
        jwt_signing: JwtSigning | None = None,
        archive: ArchiveStorage | None = None,
    ) -> None:
        self.archive = archive or ArchiveStorage()
        self.endpoint_policy = endpoint_policy or EndpointPolicy()
        self.catalog = catalog
        self.signing_keys = SigningKeys(catalog, jwt_signing or JwtSigning())
        self.clusters = clusters
        self.stores = stores
        self.default_cluster = default_cluster
        self.prefix = prefix

    @classmethod
    def of(
        cls,
        settings: ControlPlaneSettings,
        metastore: MetaStore,
        stores: dict[str, SegmentStore],
    ) -> Admin:
        """The admin service as the control plane's settings configure it."""
        return cls(
            Catalog(metastore),
            settings.clusters,
            stores,
            settings.default_cluster,
            settings.storage_topic_prefix,
            settings.endpoint_policy,
            settings.jwt_signing,
            settings.archive,
        )

    async def check_ready(self, timeout_s: float = 2.0) -> None:
        """Ready when the metastore answers a read within ``timeout_s``;
        ``MetaStoreUnavailable`` (503) if it does not."""
        try:
            async with asyncio.timeout(timeout_s):
                await self.catalog.list_projects()
        except (TimeoutError, HttpbusError) as exc:
            raise MetaStoreUnavailable("the metastore does not answer", retry_after=5) from exc

    def storage_name(self, project: str, topic: str, segment_id: int) -> str:
        """Unique per attempt, so a segment's storage topic is never reused, even when a
        topic is deleted and created again while the old storage topic is being deleted."""
        return f"{self.prefix}.{project}.{topic}.s{segment_id}.{uuid.uuid4().hex[:8]}"

    async def create_topic(self, project: str, body: TopicCreate) -> Topic:
        cluster = body.cluster or self.default_cluster
        if cluster not in self.clusters:
            raise ValidationFailed(
                f"cluster: unknown storage cluster {cluster!r}; configured: "
                f"{', '.join(sorted(self.clusters))}",
                details={"fields": [{"field": "cluster", "problem": "unknown cluster"}]},
            )
        self.check_failover(body.failover)
        self.check_archive(body.archive)
        await self.catalog.get_project(project)  # 404 before touching storage
        config = self.clusters[cluster]
        segment = Segment(
            id=1,
            cluster=cluster,
            backend=config.backend,
            storage_topic=_first_storage_topic(config, cluster, body)
            or self.storage_name(project, body.name, 1),
            partitions=body.partitions,
            state=SegmentState.ACTIVE,
        )
        fields = body.model_dump(exclude={"cluster", "partitions", "external_topic"})
        topic = Topic(project=project, **fields)
        store = self.stores[cluster]
        await store.create_topic(
            segment.storage_topic,
            segment.partitions,
            retention_ms=topic.retention_hours * 3_600_000,
        )
        try:
            return await self.catalog.create_topic(topic, segment)
        except BaseException:
            await self._drop_storage(store, segment.storage_topic)
            raise

    def check_failover(self, failover: Failover | None) -> None:
        """Every standby cluster a topic names must be configured (422 naming the field)."""
        unknown = [c for c in (failover.clusters if failover else ()) if c not in self.clusters]
        if unknown:
            raise ValidationFailed(
                f"failover.clusters: unknown storage cluster(s) {', '.join(unknown)}; "
                f"configured: {', '.join(sorted(self.clusters))}",
                details={"fields": [{"field": "failover.clusters", "problem": "unknown cluster"}]},
            )

    def check_archive(self, archive: ArchiveSpec | None) -> None:
        """A topic's archive must go where the control plane's ``archive`` setting allows
        (422 naming ``archive.to``)."""
        why = self.archive.refusal(target_of(archive.to)) if archive is not None else None
        if why is not None:
            raise ValidationFailed(
                f"archive.to: {why}",
                details={"fields": [{"field": "archive.to", "problem": why}]},
            )

    async def update_topic(self, topic: Topic) -> Topic:
        """Store new settings of a topic (a compare-and-set on its version)."""
        self.check_failover(topic.failover)
        self.check_archive(topic.archive)
        return await self.catalog.update_topic(topic)

    async def delete_topic(self, project: str, name: str, *, force: bool) -> None:
        topic = await self.catalog.delete_topic(project, name, force=force)
        for segment in topic.segments:
            store = self.stores.get(segment.cluster)
            if store is not None and segment.state is not SegmentState.RETIRED:
                await self._drop_storage(store, segment.storage_topic)

    async def _drop_storage(self, store: SegmentStore, storage_topic: str) -> None:
        await drop_storage(store, storage_topic)

    def check_endpoint(self, sub: Subscription) -> None:
        """422 naming ``endpoint.url`` (or ``auth.token_url``) if the endpoint policy refuses
        the URL as written, or ``auth.<field>`` if a write-only field is still masked."""
        urls = [("endpoint.url", str(sub.endpoint.url))]
        if isinstance(sub.auth, OAuth2ClientCredentials):
            urls.append(("auth.token_url", str(sub.auth.token_url)))
        for field, url in urls:
            problem = self.endpoint_policy.url_problem(url)
            if problem is not None:
                raise ValidationFailed(
                    f"{field}: {problem}",
                    details={"fields": [{"field": field, "problem": problem}]},
                )
        refuse_masked_auth(sub.auth)

    async def prepare_auth(self, sub: Subscription) -> None:
        """What a subscription's ``auth`` needs before a worker uses it: for ``jwt``, a
        signing key (the first is made when none exists)."""
        if isinstance(sub.auth, JwtAuth):
            await self.signing_keys.ensure()

    async def create_subscription(self, project: str, body: SubscriptionCreate) -> Subscription:
        topic_project, _, topic = body.topic.rpartition("/")
        topic_project = topic_project or project
        await self.catalog.get_project(project)
        try:
            found = await self.catalog.get_topic(topic_project, topic)
        except NotFound:
            raise ValidationFailed(
                f"topic: {topic_project}/{topic} does not exist",
                details={"fields": [{"field": "topic", "problem": "unknown topic"}]},
            ) from None
        fields = body.model_dump(exclude={"name", "topic", "signing_secret", "start"})
        sub = Subscription(
            project=project,
            name=body.name,
            topic_project=topic_project,
            topic=topic,
            signing_secret=body.signing_secret or new_signing_secret(),
            **fields,
        )
        self.check_endpoint(sub)
        refuse_masked(sub.endpoint.headers)
        await self.prepare_auth(sub)
        start = await self.start_point(found, body.start)
        return await self.catalog.create_subscription(sub.model_copy(update={"start": start}))

    async def start_point(self, topic: Topic, at: StartAt) -> StartPoint:
        """Where a subscription created now with ``start`` ``at`` begins, resolved on the
        storage now (``latest``: the ends as they are before the subscription exists, so
        every message published after it is delivered)."""
        segment, positions = await locate(topic, self.stores, at)
        return StartPoint(requested=at, segment=segment.id, positions=positions)

    async def rotate_secret(
        self,
        project: str,
        name: str,
        secret: str | None,
        overlap_s: float,
        *,
        field: str = "secret",
        at: datetime | None = None,
    ) -> Subscription:
        """Sign ``project/name``'s deliveries with ``secret`` (a new one if None) from now on,
        and with the secrets in force until ``overlap_s`` from now. Workers restart the
        subscription's runner on the change, so the next attempt carries both signatures.
        A compare-and-set, retried when a concurrent change wins; ``field`` is the request
        field a refused secret is named by (422)."""
        chosen = secret or new_signing_secret()
        for _ in range(10):
            sub = await self.catalog.get_subscription(project, name)
            rotated = rotate(sub, chosen, overlap_s, field=field, at=at)
            with contextlib.suppress(VersionConflict):
                return await self.catalog.update_subscription(rotated)
        raise VersionConflict(f"subscription {project}/{name} keeps changing; try again")

    def check_notification_url(self, url: object | None) -> None:
        """422 naming ``notification_url`` if the endpoint policy refuses it (the policy of
        subscription endpoints: notices go out from the workers as deliveries do)."""
        if url is None:
            return
        problem = self.endpoint_policy.url_problem(str(url))
        if problem is not None:
            raise ValidationFailed(
                f"notification_url: {problem}",
                details={"fields": [{"field": "notification_url", "problem": problem}]},
            )

    async def create_project(
        self,
        name: str,
        description: str = "",
        notification_url: object | None = None,
        notifications: Notifications | None = None,
    ) -> Project:
        """A new project with a notification secret of its own (notices are signed with it
        whenever a notification URL is set, now or later)."""
        self.check_notification_url(notification_url)
        project = Project.model_validate(
            {
                "name": name,
                "description": description,
                "notification_url": notification_url,
                "notification_secret": new_signing_secret(),
                "notifications": notifications or Notifications(),
            }
        )
        return await self.catalog.create_project(project)

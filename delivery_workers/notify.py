"""Notices to a project's ``notification_url``: one JSON ``POST`` per operational event of a
subscription of the project that the project wants (``Project.notifications``,
:class:`core.model.NoticeKind`): disabled and enabled (:mod:`.disabling`); failing,
recovered, dead-lettered and circuit opened / closed (:mod:`.ops_events`, which bounds how
often). docs/operations.md, "Operational events", shows every body.

A notice travels as a delivery does, through the worker's
:class:`~.sender.EndpointSender` (so the endpoint policy is checked at connect and the
connection pool is shared), signed in the Standard Webhooks form with the project's
``notification_secret`` (made when the project is created, shown once). Its
``webhook-id`` / ``X-Message-Id`` is the notice's id, the same on every attempt, so a receiver
drops a repeat. The body::

    {"type": "subscription.disabled", "id": "disabled.shop.orders.1764000000000",
     "project": "shop", "subscription": "orders", "topic": "shop/orders",
     "endpoint": "https://...", "failing_since": "...Z", "disabled_at": "...Z",
     "last_error": "HTTP 503", "worker": "w-1",
     "enable": "POST /v1/projects/shop/subscriptions/orders/enable"}

Every other kind has the same frame (``type``, ``id``, ``project``, ``subscription``,
``topic``, ``endpoint``, ``worker``, ``at``) plus its own fields (:meth:`Notifier.notify`).

Each notice is tried up to ``len(backoff_s) + 1`` times (a 2xx ends it), in a task of its
own: it never waits in front of a delivery. A worker that stops meanwhile drops it (logged).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from core.envelope import CONTENT_TYPE, MESSAGE_ID
from core.errors import HttpbusError
from core.model import Endpoint, NoticeKind, Subscription
from core.result import DeliveryResult
from metastore.catalog import Catalog
from segments.protocol import Stored

from .sender import Delivery, EndpointSender

log = logging.getLogger(__name__)

BACKOFF_S = (1.0, 5.0, 30.0, 120.0)
TIMEOUT_MS = 10_000
NOTICE_TYPE = NoticeKind.DISABLED.value


def notice_body(sub: Subscription, notice_id: str) -> bytes:
    """The JSON of the notice that ``sub`` (disabled) was disabled."""
    assert sub.disabled is not None
    d = sub.disabled
    doc = {
        "type": NOTICE_TYPE,
        "id": notice_id,
        "project": sub.project,
        "subscription": sub.name,
        "topic": f"{sub.topic_project}/{sub.topic}",
        "endpoint": str(sub.endpoint.url),
        "failing_since": _iso(d.failing_since.timestamp()),
        "disabled_at": _iso(d.disabled_at.timestamp()),
        "last_error": d.last_error,
        "worker": d.by,
        "enable": f"POST /v1/projects/{sub.project}/subscriptions/{sub.name}/enable",
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def event_body(sub: Subscription, kind: NoticeKind, notice_id: str, **fields: Any) -> bytes:
    """The JSON of an operational event of ``sub`` other than its disabling: the common
    frame and ``fields``."""
    doc = {
        "type": kind.value,
        "id": notice_id,
        "project": sub.project,
        "subscription": sub.name,
        "topic": f"{sub.topic_project}/{sub.topic}",
        "endpoint": str(sub.endpoint.url),
        "at": _iso(time.time()),
        **fields,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def iso(epoch_s: float) -> str:
    """An epoch time as the notices write it (RFC 3339, UTC, seconds)."""
    return _iso(epoch_s)


def _iso(epoch_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


class Notifier:
    """Sends notices through ``sender`` (see the module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        sender: EndpointSender,
        *,
        backoff_s: Sequence[float] = BACKOFF_S,
    ) -> None:
        self.catalog = catalog
        self.sender = sender
        self.backoff_s = tuple(backoff_s)
        self.sent = 0  # notices a 2xx acknowledged
        self.failed = 0  # notices every attempt of which failed
        self.unwanted = 0  # events the project does not want (Project.notifications)
        self._tasks: set[asyncio.Task[None]] = set()

    def disabled(self, sub: Subscription) -> None:
        """Tell ``sub``'s project that ``sub`` was disabled (in the background)."""
        assert sub.disabled is not None
        disabled_ms = int(sub.disabled.disabled_at.timestamp() * 1000)
        notice_id = f"disabled.{sub.project}.{sub.name}.{disabled_ms}"
        self._spawn(self._notify(sub, NoticeKind.DISABLED, notice_id, notice_body(sub, notice_id)))

    def notify(
        self, project: str, name: str, kind: NoticeKind, notice_id: str, **fields: Any
    ) -> None:
        """Tell the project of subscription ``project/name`` of event ``kind`` (in the
        background), if the project wants it. ``notice_id`` is its ``webhook-id``: made of
        what every worker would derive the same way, so a receiver drops a repeat."""
        self._spawn(self._event(project, name, kind, notice_id, fields))

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _event(
        self, project: str, name: str, kind: NoticeKind, notice_id: str, fields: dict[str, Any]
    ) -> None:
        try:
            sub = await self.catalog.get_subscription(project, name)
        except HttpbusError as exc:  # deleted meanwhile, or the metastore is away
            log.warning("no %s notice of %s/%s: %s", kind.value, project, name, exc)
            return
        body = event_body(sub, kind, notice_id, **fields)
        await self._notify(sub, kind, notice_id, body)

    async def _notify(
        self, sub: Subscription, kind: NoticeKind, notice_id: str, body: bytes
    ) -> None:
        try:
            project = await self.catalog.get_project(sub.project)
        except Exception as exc:  # the metastore is away: say what is lost
            log.warning("no notice %s of %s/%s: %s", notice_id, sub.project, sub.name, exc)
            return
        if project.notification_url is None or project.notification_secret is None:
            log.info("project %s has no notification endpoint", sub.project)
            return
        if not project.notifications.wants(kind):
            self.unwanted += 1
            return
        target = sub.model_copy(
            update={
                "endpoint": Endpoint(url=project.notification_url, timeout_ms=TIMEOUT_MS),
                "signing_secret": project.notification_secret,
                "retiring_secrets": (),
            }
        )
        headers = (
            (MESSAGE_ID, notice_id.encode()),
            (CONTENT_TYPE, b"application/json"),
        )
        message = Stored(0, 0, int(time.time() * 1000), body, None, headers)
        topic = f"{sub.topic_project}/{sub.topic}"
        result = DeliveryResult()
        for attempt, wait in enumerate((*self.backoff_s, None), start=1):
            result = await self._send(Delivery(target, topic, message, attempt))
            if result.succeeded:
                self.sent += 1
                return
            if wait is not None:
                await asyncio.sleep(wait)
        self.failed += 1
        log.warning("notice %s to %s failed: %s", notice_id, project.notification_url, result.error)

    async def _send(self, delivery: Delivery) -> DeliveryResult:
        try:
            return await self.sender.send(delivery)
        except Exception as exc:  # a sender bug must not end the retries
            return DeliveryResult.from_exception(exc, 0.0)

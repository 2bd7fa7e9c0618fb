"""One event POSTed to the producer service as a CloudEvent in binary mode, and what came of
it as a value (:class:`Posted`): accepted, a duplicate, worth another try, or refused."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import Enum

import httpx

from core.cloudevents import SPECVERSION, quote

from .events import OutboxEvent
from .metrics import RelayMetrics

log = logging.getLogger("outbox_relay.poster")

RETRYABLE = frozenset({408, 425, 429})  # and every 5xx


class Outcome(Enum):
    STORED = "stored"  # 201: stored now
    DUPLICATE = "duplicate"  # 200 duplicate: stored by an earlier try (a replay)
    RETRY = "retry"  # worth another try: throttled, unavailable, unreachable
    REFUSED = "refused"  # httpbus will not take it as it is: the relay stops


@dataclass(frozen=True, slots=True)
class Posted:
    outcome: Outcome
    status: int | None
    detail: str
    retry_after: float | None = None

    @classmethod
    def from_response(cls, response: httpx.Response) -> Posted:
        status = response.status_code
        if 200 <= status < 300:
            duplicate = status == 200 and _duplicate(response)
            return cls(Outcome.DUPLICATE if duplicate else Outcome.STORED, status, "")
        if status in RETRYABLE or status >= 500:
            return cls(Outcome.RETRY, status, response.text[:300], _retry_after(response))
        return cls(Outcome.REFUSED, status, response.text[:500])


class RefusedEvent(Exception):
    """httpbus answered an event with a 4xx that another try will not change."""


class Poster:
    """POSTs events to ``{producer_url}/v1/projects/{project}/topics/{topic}/produce``.

    Example::

        async with httpx.AsyncClient() as client:
            poster = Poster(client, url, source="/orders", group_attribute="partitionkey")
            posted = await poster.post(event)   # retries until httpbus takes it
    """

    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        *,
        source: str,
        group_attribute: str,
        content_type: str,
        retry_max_s: float,
        metrics: RelayMetrics | None = None,
    ) -> None:
        self.client, self.url, self.metrics = client, url, metrics
        self.source, self.group_attribute = quote(source), group_attribute
        self.content_type, self.retry_max_s = content_type, retry_max_s

    def headers(self, event: OutboxEvent) -> dict[str, str]:
        """The binary mode's attributes: id, the group attribute, type, the aggregate type."""
        return {
            "content-type": self.content_type,
            "ce-specversion": SPECVERSION,
            "ce-id": event.id,
            "ce-source": self.source,
            "ce-type": quote(event.type),
            f"ce-{self.group_attribute}": quote(event.aggregate_id),
            "ce-aggregatetype": quote(event.aggregate_type),
        }

    async def once(self, event: OutboxEvent) -> Posted:
        """One try."""
        try:
            response = await self.client.post(
                self.url, headers=self.headers(event), content=event.payload
            )
        except httpx.TransportError as exc:
            return Posted(Outcome.RETRY, None, f"{type(exc).__name__}: {exc}")
        return Posted.from_response(response)

    async def post(self, event: OutboxEvent) -> Posted:
        """Tries until httpbus takes the event (stored or duplicate); raises
        :class:`RefusedEvent` when it refuses it. Waits double up to ``retry_max_s``, or
        what ``Retry-After`` says."""
        wait = 0.1
        while True:
            posted = await self.once(event)
            if posted.outcome is Outcome.REFUSED:
                raise RefusedEvent(
                    f"httpbus refused outbox event {event.id} (aggregate {event.aggregate_id}) "
                    f"with {posted.status}: {posted.detail}"
                )
            if posted.outcome is not Outcome.RETRY:
                return posted
            pause = min(posted.retry_after or wait, self.retry_max_s)
            if self.metrics is not None:
                self.metrics.retries.inc()
            log.warning(
                "event %s: %s %s; again in %.1fs",
                event.id,
                posted.status or "no answer:",
                posted.detail[:120],
                pause,
            )
            await asyncio.sleep(pause)
            wait = min(wait * 2, self.retry_max_s)


def _duplicate(response: httpx.Response) -> bool:
    try:
        return bool(response.json().get("duplicate", False))
    except ValueError:
        return False


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None

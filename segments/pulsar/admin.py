"""A small async client of the Pulsar admin REST API (``/admin/v2/persistent/...``).

Only the calls this backend needs: partitioned topics, retention, last message ids,
termination, internal stats (cursor positions, sealed state), subscriptions and their
cursors. Every answer other than 2xx becomes an httpbus error (``errors.from_admin_status``);
every transport failure or timeout becomes ``StorageUnavailable``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any
from urllib.parse import quote

import httpx

from core.errors import StorageUnavailable

from .errors import from_admin_status, from_transport

log = logging.getLogger(__name__)

Json = Any
EARLIEST = (-1, -1)
"""The (ledger, entry) Pulsar reads as "before the first message" in cursor calls."""
MAX_REDIRECTS = 4  # a call and the redirects it follows (from a broker to the topic's owner)
RESENT = (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)
"""A kept-alive connection that failed under a request: the broker closed it as it was reused,
or the pool closed it after handing it out (encode/httpcore#1110, a ReadError caused by anyio's
ClosedResourceError under concurrent calls). A read (GET) is sent once more, as browsers and
urllib3 do; a change is not, as it may have been applied."""


class PulsarAdmin:
    """The admin API of one tenant/namespace. Inject ``http`` to share a connection pool;
    otherwise the admin owns (and closes) its own ``httpx.AsyncClient``.

    Each call runs as a task of its own, so that closing can end the calls still in flight
    first: an ``httpx`` client closed under a request that is connecting leaves that
    connection open and unowned (its socket leaks). A call ended that way raises
    ``StorageUnavailable``; cancelling the caller still cancels its call."""

    def __init__(
        self,
        base_url: str,
        *,
        tenant: str,
        namespace: str,
        timeout_s: float,
        token: str | None = None,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._base = f"{base_url.rstrip('/')}/admin/v2/persistent/{tenant}/{namespace}"
        self._owns_http = http is None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = http or httpx.AsyncClient(timeout=timeout_s)
        self._headers = headers
        self._timeout = timeout_s
        self._in_flight: set[asyncio.Task[httpx.Response]] = set()
        self._closed = False

    async def aclose(self) -> None:
        self._closed = True
        if self._in_flight:
            log.warning(
                "pulsar admin closed under %d calls in flight; ending them: %s",
                len(self._in_flight),
                ", ".join(sorted(t.get_name() for t in self._in_flight)),
            )
            for call in self._in_flight:
                call.cancel()
            _, running = await asyncio.wait(self._in_flight, timeout=self._timeout)
            if running:  # its connection outlives the pool and leaks: say whose it is
                names = ", ".join(sorted(t.get_name() for t in running))
                log.error("pulsar admin closed; %d calls did not end: %s", len(running), names)
        if self._owns_http:
            await self._http.aclose()

    async def _call(
        self,
        method: str,
        topic: str,
        suffix: str = "",
        *,
        json: Json = None,
        params: dict[str, str] | None = None,
    ) -> httpx.Response:
        url = f"{self._base}/{quote(topic, safe='')}{suffix}"
        what = f"{method} {topic}{suffix}"
        if self._closed:
            raise StorageUnavailable(f"{what}: the pulsar admin client is closed")
        call = asyncio.ensure_future(self._send(method, url, json, params))
        call.set_name(f"{what} for {_caller()}")
        self._in_flight.add(call)
        try:
            resp = await call  # cancelling the caller cancels ``call`` too
        except httpx.HTTPError as exc:
            raise from_transport(exc, what) from exc
        except asyncio.CancelledError:
            if _cancelled_here():
                raise
            raise StorageUnavailable(f"{what}: ended, the pulsar admin client closed") from None
        finally:
            self._in_flight.discard(call)
        if resp.status_code >= 300:
            raise from_admin_status(resp.status_code, _reason(resp), what)
        return resp

    async def _send(
        self, method: str, url: str, json: Json, params: dict[str, str] | None
    ) -> httpx.Response:
        """The request, and the ones a redirect asks for: in a cluster of brokers, a call on
        a topic another broker owns answers 307 with that broker's URL. Followed here, not
        by ``httpx``, which would drop the token on the way to another port."""
        for _ in range(MAX_REDIRECTS):
            resp = await self._request(method, url, json, params)
            location = resp.headers.get("location")
            if resp.status_code not in (307, 308) or not location:
                return resp
            url, params = str(resp.url.join(location)), None  # the query is in the location
        return resp

    async def _request(
        self, method: str, url: str, json: Json, params: dict[str, str] | None
    ) -> httpx.Response:
        resends = 1 if method == "GET" else 0
        while True:
            try:
                return await self._http.request(
                    method,
                    url,
                    json=json,
                    params=params,
                    headers=self._headers,
                    timeout=self._timeout,
                )
            except RESENT as exc:
                if not resends:
                    raise
                resends -= 1
                log.info("pulsar admin: GET %s failed on its connection (%r); sent again", url, exc)

    # -- partitioned topics ---------------------------------------------------------------

    async def create_partitioned_topic(self, topic: str, partitions: int) -> None:
        """``AlreadyExists`` if the topic exists."""
        await self._call("PUT", topic, "/partitions", json=partitions)

    async def delete_partitioned_topic(self, topic: str) -> None:
        """Force delete: producers, readers and subscriptions are dropped. ``NotFound``."""
        await self._call("DELETE", topic, "/partitions", params={"force": "true"})

    async def partition_count(self, topic: str) -> int:
        """The partition count (0 for a non-partitioned topic); ``NotFound`` if absent."""
        resp = await self._call("GET", topic, "/partitions")
        return int(resp.json().get("partitions", 0))

    async def set_retention(self, topic: str, minutes: int) -> None:
        """A topic-level retention policy (needs ``topicLevelPoliciesEnabled``): acknowledged
        or not, messages are kept ``minutes`` (-1: forever), with no size bound."""
        body = {"retentionTimeInMinutes": minutes, "retentionSizeInMB": -1}
        await self._call("POST", topic, "/retention", json=body)

    async def partitioned_internal_stats(self, topic: str) -> dict[str, Json]:
        """Per partition topic URL, its managed-ledger internal stats (state, cursors)."""
        resp = await self._call("GET", topic, "/partitioned-internalStats")
        partitions: dict[str, Json] = resp.json().get("partitions", {})
        return partitions

    async def partitioned_stats(self, topic: str) -> dict[str, Json]:
        """Per partition topic URL, its stats (subscriptions with their ``msgBacklog``)."""
        resp = await self._call("GET", topic, "/partitioned-stats", params={"perPartition": "true"})
        partitions: dict[str, Json] = resp.json().get("partitions", {})
        return partitions

    # -- one partition topic --------------------------------------------------------------

    async def last_message_id(self, partition_topic: str) -> tuple[int, int]:
        """(ledger, entry) of the last stored entry; entry -1 if there is none."""
        resp = await self._call("GET", partition_topic, "/lastMessageId")
        return _ledger_entry(resp.json())

    async def terminate(self, partition_topic: str) -> tuple[int, int]:
        """Terminate the topic (idempotent); (ledger, entry) of its last entry."""
        resp = await self._call("POST", partition_topic, "/terminate")
        return _ledger_entry(resp.json())

    async def batch_size(self, partition_topic: str, ledger: int, entry: int) -> int:
        """How many messages entry (ledger, entry) holds (1 if it is not a batch)."""
        resp = await self._call("GET", partition_topic, f"/ledger/{ledger}/entry/{entry}")
        return int(resp.headers.get("x-pulsar-num-batch-message", "1"))

    async def create_subscription(
        self, partition_topic: str, subscription: str, at: tuple[int, int]
    ) -> None:
        """A durable subscription whose next entry to read is ``at``. ``AlreadyExists``."""
        await self._call(
            "PUT",
            partition_topic,
            f"/subscription/{quote(subscription, safe='')}",
            json={"ledgerId": at[0], "entryId": at[1]},
        )

    async def reset_cursor(
        self, partition_topic: str, subscription: str, at: tuple[int, int]
    ) -> None:
        """Move the subscription's cursor so that ``at`` is the next entry to read (every
        entry before it marked deleted). ``NotFound`` if the subscription is absent."""
        await self._call(
            "POST",
            partition_topic,
            f"/subscription/{quote(subscription, safe='')}/resetcursor",
            json={"ledgerId": at[0], "entryId": at[1], "isExcluded": False},
        )


def _ledger_entry(body: dict[str, Json]) -> tuple[int, int]:
    return int(body["ledgerId"]), int(body["entryId"])


def _reason(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    if isinstance(body, dict):
        return str(body.get("reason", body))[:200]
    return str(body)[:200]


def _caller() -> str:
    task = asyncio.current_task()
    return getattr(task.get_coro(), "__qualname__", task.get_name()) if task else "?"


def _cancelled_here() -> bool:
    """Whether the running task itself is being cancelled (not only the call it awaited)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0

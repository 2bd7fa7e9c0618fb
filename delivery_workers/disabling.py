"""Endpoint lifecycle: a subscription whose endpoint has failed every attempt for
``endpoint.disable_after_s`` is disabled, durably, by the worker that saw it.

- **What fails** (:func:`endpoint_failed`, the one place that says it): an attempt that was
  sent and not answered 2xx — a 4xx or 5xx, a timeout, a connection error — except a 429
  with ``Retry-After`` (the endpoint paces us: it is alive) and attempts that were never
  sent or failed inside the worker (:attr:`~core.result.ErrorKind.INVALID_REQUEST`,
  :attr:`~core.result.ErrorKind.UNEXPECTED`), which say nothing about the endpoint.
- **Failing since** (:class:`FailureStreak`, pure, clock injected): the time of the first
  failed attempt after the last success. The worker writes it to
  ``/failing/{project}:{s}`` when a streak begins and deletes it at the next success, so a
  worker restart or a reassignment keeps the clock (two metastore writes per outage, none
  per attempt); a worker that takes the subscription over reads it back.
- **Disabling** (:class:`Disabling`): at a failed attempt at least ``disable_after_s`` after
  the streak began, the worker sets the subscription's ``disabled`` field by
  compare-and-set (one worker wins; a subscription already disabled is left alone). The
  worker's watch of the subscription then stops the runner as a pause does: nothing is
  committed past what was terminal, so every message not delivered yet is delivered after
  ``POST …/enable``. The winner appends an ``AuditType.DISABLED`` event, counts
  ``httpbus_subscription_disabled_total`` and posts one notice to the project's
  ``notification_url`` (:mod:`.notify`) in the background.

A subscription with ``disable_after_s`` null is never disabled. No attempts, no verdict:
an endpoint nobody sends to is not judged, so after a quiet spell the first failure of a
streak that began long ago disables at once (no success came in between).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from core.audit import AuditEvent, AuditType
from core.errors import AlreadyExists, HttpbusError, NotFound, VersionConflict
from core.model import Disabled, NoticeKind, Subscription
from core.result import DeliveryResult, ErrorKind
from core.shards import parse_unit_key
from metastore import paths
from metastore.catalog import Catalog
from segments.audit import AuditSink

from .notify import Notifier

log = logging.getLogger(__name__)

_NEUTRAL = frozenset({ErrorKind.INVALID_REQUEST, ErrorKind.UNEXPECTED, ErrorKind.REPORTED_FAILED})


def endpoint_failed(result: DeliveryResult) -> bool | None:
    """True: the endpoint failed this attempt; False: it answered 2xx; None: the attempt says
    nothing of the endpoint's health (see the module doc)."""
    status = result.status
    if status is None:
        return None if result.error_kind in _NEUTRAL else True
    if 200 <= status < 300:
        return False
    return None if status == 429 and result.retry_after is not None else True


class Change(Enum):
    BEGAN = "began"  # the first failure after a success (or ever)
    ENDED = "ended"  # the first success after failures


class FailureStreak:
    """When the endpoint's current run of failed attempts began (pure; times in epoch
    seconds).

    >>> streak = FailureStreak()
    >>> streak.record(True, 100.0)
    <Change.BEGAN: 'began'>
    >>> streak.record(True, 130.0) is None, streak.lasted(130.0)
    (True, 30.0)
    >>> streak.record(False, 140.0)
    <Change.ENDED: 'ended'>
    """

    def __init__(self, since_s: float | None = None) -> None:
        self.since_s = since_s

    def record(self, failed: bool, now_s: float) -> Change | None:
        if failed:
            if self.since_s is None:
                self.since_s = now_s
                return Change.BEGAN
            return None
        if self.since_s is not None:
            self.since_s = None
            return Change.ENDED
        return None

    def lasted(self, now_s: float) -> float:
        """Seconds since the streak began (0 when none is under way)."""
        return 0.0 if self.since_s is None else max(0.0, now_s - self.since_s)

    def due(self, window_s: float | None, now_s: float) -> bool:
        """The streak has lasted ``window_s`` (None: never due)."""
        return window_s is not None and self.since_s is not None and self.lasted(now_s) >= window_s


class EndpointWatch:
    """One held subscription (or shard) on one worker: :mod:`.attempt` feeds it every
    attempt's result (:meth:`record`, cheap and synchronous); writes to the metastore and the
    disabling run in the background, in order, through ``spawn``."""

    def __init__(
        self,
        sub: Subscription,
        catalog: Catalog,
        disable: Callable[[Subscription, float, str | None], Coroutine[Any, Any, None]],
        spawn: Callable[[Coroutine[Any, Any, None]], None],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.sub = sub  # the runner's, refreshed at every (re)start
        self.catalog = catalog
        self.streak = FailureStreak()
        self.last_error: str | None = None
        self._disable = disable
        self._spawn = spawn
        self._clock = clock
        self._turn = asyncio.Lock()  # the background writes go in the order they were made
        self._asked = False  # disabling asked for in this streak

    @property
    def path(self) -> str:
        return paths.endpoint_failing(self.sub.project, self.sub.name)

    async def load(self) -> None:
        """Adopt a streak a previous owner (or another shard) recorded."""
        node = await self.catalog.store.get(self.path)
        if node is not None:
            since = _since(node.data)
            if since is not None and (self.streak.since_s is None or since < self.streak.since_s):
                self.streak.since_s = since

    def reset(self) -> None:
        """The subscription was enabled again: forget the streak (``/enable`` deleted the
        node)."""
        self.streak = FailureStreak()
        self._asked = False

    def record(self, result: DeliveryResult) -> None:
        failed = endpoint_failed(result)
        if failed is None:
            return
        now = self._clock()
        change = self.streak.record(failed, now)
        if failed:
            self.last_error = result.error
        if change is Change.BEGAN:
            self._spawn(self._persist(now))
        elif change is Change.ENDED:
            self._asked = False
            self._spawn(self._forget())
        if failed and not self._asked and self.streak.due(self.sub.endpoint.disable_after_s, now):
            self._asked = True
            since = self.streak.since_s
            assert since is not None
            self._spawn(self._ask(since))

    async def _ask(self, since_s: float) -> None:
        try:
            await self._disable(self.sub, since_s, self.last_error)
        except BaseException:  # the metastore is away: the next failure asks again
            self._asked = False
            raise

    async def _persist(self, since_s: float) -> None:
        data = json.dumps({"since_ms": int(since_s * 1000)}).encode()
        async with self._turn:
            try:
                await self.catalog.store.create(self.path, data)
            except AlreadyExists:  # an older streak (another shard, a previous owner) stands
                await self.load()

    async def _forget(self) -> None:
        async with self._turn:
            with contextlib.suppress(NotFound):
                await self.catalog.store.delete(self.path)


def _since(data: bytes) -> float | None:
    try:
        return float(json.loads(data)["since_ms"]) / 1000
    except (ValueError, TypeError, KeyError):
        return None


class Disabling:
    """A worker's part in the endpoint lifecycle: one :class:`EndpointWatch` per held
    subscription (kept over runner restarts), the disabling compare-and-set, its audit event,
    metric and notice (see the module doc)."""

    def __init__(
        self,
        catalog: Catalog,
        member_id: str,
        notifier: Notifier,
        *,
        audit: AuditSink | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.catalog = catalog
        self.member_id = member_id
        self.notifier = notifier
        self.audit = audit
        self.clock = clock
        self.watches: dict[str, EndpointWatch] = {}  # by assignment key
        self.disabled_total: dict[str, int] = {}  # by assignment key: this worker's doing
        self._tasks: set[asyncio.Task[None]] = set()

    async def watch(self, key: str, sub: Subscription) -> EndpointWatch:
        """The watch of assignment ``key``, made (and its persisted streak read) at first."""
        found = self.watches.get(key)
        if found is None:
            disable = functools.partial(self.disable, key)
            found = EndpointWatch(sub, self.catalog, disable, self.spawn, clock=self.clock)
            await found.load()
            self.watches[key] = found
        found.sub = sub
        return found

    def enabled(self, key: str, sub: Subscription) -> None:
        """The subscription of ``key`` was enabled again: its streak starts over, and the
        audit trail hears of it."""
        watch = self.watches.get(key)
        if watch is not None:
            watch.reset()
        if self.audit is not None:
            self.audit.emit(lifecycle_event(sub, AuditType.ENABLED, time.time()))
        if parse_unit_key(key)[2] in (None, 0):  # one notice for all the shards
            notice = f"enabled.{sub.project}.{sub.name}.{sub.version}"
            self.notifier.notify(
                sub.project, sub.name, NoticeKind.ENABLED, notice, worker=self.member_id
            )

    def failing_for(self, key: str) -> float | None:
        """Seconds the endpoint of ``key`` has failed every attempt (None: it has not)."""
        watch = self.watches.get(key)
        if watch is None or watch.streak.since_s is None:
            return None
        return watch.streak.lasted(self.clock())

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(self._logged(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.notifier.cancel()

    async def _logged(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except HttpbusError as exc:  # the metastore is away: the next failure asks again
            log.warning("endpoint lifecycle: %s", exc)

    async def disable(self, key: str, sub: Subscription, since_s: float, error: str | None) -> None:
        """Disable ``sub`` (compare-and-set; a no-op if it is disabled already) for the
        watch of assignment ``key``."""
        now = self.clock()
        marker = Disabled(
            failing_since=datetime.fromtimestamp(since_s, UTC),
            disabled_at=datetime.fromtimestamp(now, UTC),
            last_error=error[:500] if error else None,
            by=self.member_id,
        )
        for _ in range(10):
            try:
                current = await self.catalog.get_subscription(sub.project, sub.name)
            except NotFound:
                return
            if current.disabled is not None:
                return
            with contextlib.suppress(VersionConflict):
                done = await self.catalog.update_subscription(
                    current.model_copy(update={"disabled": marker})
                )
                break
        else:
            log.warning("could not disable %s/%s: it keeps changing", sub.project, sub.name)
            return
        log.warning("subscription %s/%s disabled: %s", sub.project, sub.name, marker.describe())
        self.disabled_total[key] = self.disabled_total.get(key, 0) + 1
        if self.audit is not None:
            self.audit.emit(lifecycle_event(done, AuditType.DISABLED, now))
        self.notifier.disabled(done)


def lifecycle_event(sub: Subscription, type: AuditType, at_s: float) -> AuditEvent:
    """The audit event of ``sub`` disabled or enabled (``message_id`` is "")."""
    since = sub.disabled.failing_since if sub.disabled is not None else None
    return AuditEvent(
        type=type,
        message_id="",
        project=sub.topic_project,
        topic=sub.topic,
        subscription=f"{sub.project}/{sub.name}",
        at_ms=int(at_s * 1000),
        failing_since_ms=int(since.timestamp() * 1000) if since is not None else None,
        error=sub.disabled.last_error if sub.disabled is not None else None,
    )

"""Commits through an AdminClient of their own: at most one request per group under way,
none given up by librdkafka while it waits for its coordinator, and the client replaced when
it stops answering.

**Why librdkafka never times a commit out.** A request to a group coordinator
(``AlterConsumerGroupOffsets``) first waits for the coordinator's connection. If the request's
own timeout passes meanwhile, librdkafka frees the request but keeps the wait; when the
coordinator is back, the wait finds the request gone, and its error path releases the
request's ``eonce`` a second time: ``rd_kafka_enq_once_del_source_return: Assertion
`eonce->refcnt > 0'`` aborts the process (librdkafka 2.16; upstream issues #3663 and #4605,
fix proposed in #5397). With a 10 s timeout, a broker frozen 30 s under the commits of 500
subscriptions aborted the worker as it woke (``tests/chaos/test_frozen_broker.py``). So a
request is sent with librdkafka's longest timeout (an hour, ``ADMIN_REQUEST_TIMEOUT_S``) and
the caller's wait is bounded here instead (``timeout``), leaving the request alive: it is
answered when the coordinator is back, or failed when its client is destroyed, both safe.

**One request per group.** The next commit of a group waits for the request still under way
(within its own bound) before it sends, so the requests a client holds never exceed the groups
it commits, whatever the outage's length; and a late answer can never land after a newer
commit of the same group (which would move its position back).

**Replacement.** After a broker was killed and started again on the same data directory, the
AdminClient that knew it went on taking commits and never answered one (every commit of a
worker ran into its bound for as long as the process lived; a fresh client committed at once).
So the client is replaced after ``REPLACE_AFTER`` commits in a row got no answer, and the
replaced one let go ``RETIRED_FOR_S`` later, in a thread (destroying a librdkafka handle waits
for its threads: not on the event loop); destroying it fails its requests, which frees their
groups for the new client, long before any could reach librdkafka's timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from core.errors import StorageUnavailable

from .config import KafkaSettings
from .consumer import check_commit, send_commit
from .errors import retrying, translate, unavailable

log = logging.getLogger(__name__)

REPLACE_AFTER = 2
"""Commits in a row without an answer after which the client is replaced."""
RETIRED_FOR_S = 20.0
"""How long a replaced client is kept before it is let go (see the module doc)."""
FIGURES_EVERY_S = 10.0


class CommitFigures:
    """What the client did since the last log line (``kafka commits: …``)."""

    def __init__(self) -> None:
        self.sent = self.answered = self.unanswered = self.most_under_way = 0
        self.since = time.monotonic()

    def line(self, under_way: int, replaced: int) -> str:
        spent = max(1e-3, time.monotonic() - self.since)
        return (
            f"kafka commits: {self.sent} sent, {self.answered} answered "
            f"({self.answered / spent:.0f}/s), {self.unanswered} unanswered, {under_way} "
            f"under way (at most {self.most_under_way}), {replaced} replaced, in {spent:.0f} s"
        )


class CommitClient:
    """Commits of every group of one store (see the module doc)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._admin: Any = None
        self._unanswered = 0
        self._retired: list[tuple[float, Any]] = []  # (when replaced, client)
        # Per group, the request still under way and the client it went to.
        self._under_way: dict[str, tuple[Any, asyncio.Future[Any]]] = {}
        self.figures = CommitFigures()
        self.replaced = 0
        """How many times the client was replaced (for tests and logs)."""

    @property
    def under_way(self) -> int:
        """Requests sent and not answered yet, over every group."""
        return sum(1 for _, sent in self._under_way.values() if not sent.done())

    async def commit(
        self, group: str, topic: str, positions: dict[int, int], timeout: float
    ) -> None:
        if not positions:
            return
        admin = self._client()
        deadline = time.monotonic() + timeout
        what = f"commit of {group} on {topic}"
        try:
            await self._previous_done(admin, group, deadline, what)
            await retrying(
                lambda: self._send(admin, group, topic, positions, deadline, what),
                timeout=max(0.0, deadline - time.monotonic()),
                what=what,
            )
        except StorageUnavailable as exc:
            if isinstance(exc.__cause__, TimeoutError):
                self.figures.unanswered += 1
                await self._unanswered_by(admin)
            raise
        finally:
            admin.poll(0)  # serves its log queue (the ``logger`` of the config): nothing waits
            await self._housekeeping()
        if admin is self._admin:  # an answer from a replaced client says nothing of this one
            self._unanswered = 0

    async def _previous_done(self, admin: Any, group: str, deadline: float, what: str) -> None:
        """Until the group's request under way (if any) is done, within ``deadline``."""
        previous = self._under_way.get(group)
        if previous is None or previous[1].done():
            return
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await asyncio.wait([previous[1]])
        except TimeoutError as exc:
            if previous[0] is not admin:  # a replaced client's: says nothing of this one
                raise unavailable(what, "waits for a replaced client's request") from None
            raise unavailable(what, "waits for the group's previous commit") from exc

    async def _send(
        self,
        admin: Any,
        group: str,
        topic: str,
        positions: dict[int, int],
        deadline: float,
        what: str,
    ) -> None:
        try:
            sent = asyncio.wrap_future(send_commit(admin, group, topic, positions))
        except KafkaException as exc:
            raise translate(exc, what) from exc
        sent.add_done_callback(_retrieved)
        self._under_way[group] = (admin, sent)
        self.figures.sent += 1
        self.figures.most_under_way = max(self.figures.most_under_way, self.under_way)
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                got = await asyncio.shield(sent)  # left under way: see the module doc
        except KafkaException as exc:
            raise translate(exc, what) from exc
        self.figures.answered += 1
        check_commit(got, what)

    def _client(self) -> Any:
        if self._admin is None:
            try:
                self._admin = AdminClient(self._settings.admin())
            except KafkaException as exc:
                raise translate(exc, "create the commit client") from exc
        return self._admin

    async def _unanswered_by(self, admin: Any) -> None:
        if admin is not self._admin:  # already replaced by a concurrent commit
            return
        self._unanswered += 1
        if self._unanswered < REPLACE_AFTER:
            return
        self._admin, self._unanswered = None, 0
        self.replaced += 1
        log.warning(
            "kafka: %d commits in a row got no answer; the commit client is replaced",
            REPLACE_AFTER,
        )
        self._retired.append((time.monotonic(), admin))

    async def _housekeeping(self) -> None:
        """Let go of the clients replaced ``RETIRED_FOR_S`` ago, forget the answered requests,
        and log the figures every ``FIGURES_EVERY_S``."""
        now = time.monotonic()
        due = [admin for at, admin in self._retired if now - at >= RETIRED_FOR_S]
        if due:
            self._retired = [(at, a) for at, a in self._retired if now - at < RETIRED_FOR_S]
            # Their requests go with them (destroying a client fails them): a group whose
            # request was left on one commits through the new client from now on.
            gone = {id(admin) for admin in due}
            self._under_way = {g: u for g, u in self._under_way.items() if id(u[0]) not in gone}
            await asyncio.to_thread(due.clear)  # their last references go off the loop
        if now - self.figures.since >= FIGURES_EVERY_S:
            self._under_way = {g: u for g, u in self._under_way.items() if not u[1].done()}
            log.info("%s", self.figures.line(self.under_way, self.replaced))
            self.figures = CommitFigures()


def _retrieved(sent: asyncio.Future[Any]) -> None:
    # Its caller may have stopped waiting (its bound): the error was reported as a timeout.
    if not sent.cancelled():
        sent.exception()

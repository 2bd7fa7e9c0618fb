"""Commits through an AdminClient of their own, replaced when it stops answering.

After a broker is killed and started again on the same data directory, the AdminClient that
knew it went on taking commits (``AlterConsumerGroupOffsets``) and never answered one: every
commit of a worker ran into its 5 s bound for as long as the process lived, so its runners
restarted in a loop and the subscription stopped moving (45 s and a worker restart in
``test_failover_real``'s SIGKILL case; a fresh client in the restarted process committed at
once). So commits get a client of their own, which the next commit replaces after
``REPLACE_AFTER`` commits in a row got no answer. A replaced client is kept a while (the
failed calls' frames and tracebacks still hold it, and destroying a librdkafka handle waits
for its threads: it must not happen on the event loop), then let go in a thread once
``RETIRED_KEPT`` newer ones were replaced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from core.errors import StorageUnavailable

from .config import KafkaSettings
from .consumer import commit_offsets
from .errors import retrying, translate

log = logging.getLogger(__name__)

REPLACE_AFTER = 2
"""Commits in a row without an answer after which the client is replaced."""
RETIRED_KEPT = 4


class CommitClient:
    """Commits of every group of one store (see the module doc)."""

    def __init__(self, settings: KafkaSettings) -> None:
        self._settings = settings
        self._admin: Any = None
        self._unanswered = 0
        self._retired: list[Any] = []
        self.replaced = 0
        """How many times the client was replaced (for tests and logs)."""

    async def commit(
        self, group: str, topic: str, positions: dict[int, int], timeout: float
    ) -> None:
        admin = self._client()
        what = f"commit of {group} on {topic}"
        try:
            await retrying(
                lambda: commit_offsets(admin, group, topic, positions, timeout),
                timeout=timeout,
                what=what,
            )
        except StorageUnavailable as exc:
            if isinstance(exc.__cause__, TimeoutError):
                await self._unanswered_by(admin)
            raise
        finally:
            admin.poll(0)  # serves its log queue (the ``logger`` of the config): nothing waits
        if admin is self._admin:  # an answer from a replaced client says nothing of this one
            self._unanswered = 0

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
        self._retired.append(admin)
        if len(self._retired) > RETIRED_KEPT:
            oldest = [self._retired.pop(0)]
            await asyncio.to_thread(oldest.clear)  # its last reference goes off the loop

"""Send a test event to a subscription's endpoint (``core.sample_event``): the control plane
asks, the worker holding the subscription sends it through its own delivery sender (the
control plane never imports the workers, and never sends to endpoints itself: the request is
the workers' to build, sign and guard, so it is exactly a delivery's)."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from core.errors import AlreadyExists, HttpbusError, InUse, NotReady
from core.sample_event import SampleNode, SampleRequest, SampleResult
from metastore import paths
from metastore.catalog import Catalog

WORKER_WAIT_S = 10.0  # beyond the endpoint's timeout: for the worker to see the request


class SampleEvents:
    """Test events of the subscriptions of one catalog, asked as ``member``."""

    def __init__(self, catalog: Catalog, member: str, *, worker_wait_s: float = WORKER_WAIT_S):
        self.catalog = catalog
        self.member = member
        self.worker_wait_s = worker_wait_s

    async def send(self, project: str, name: str) -> SampleResult:
        """Have the worker holding ``project/name`` send it a test event; its result.
        ``InUse`` while another is under way, ``NotReady`` if no worker answered in time."""
        sub = await self.catalog.get_subscription(project, name)  # 404 first
        request = SampleRequest(id=uuid.uuid4().hex, at_ms=int(time.time() * 1000), by=self.member)
        path, meta = paths.test_event(project, name), self.catalog.store
        data = SampleNode(request=request).model_dump_json().encode()
        try:
            # Ephemeral: a control plane that dies waiting leaves no request behind.
            await meta.create(path, data, ephemeral=True)
        except AlreadyExists:
            raise InUse(f"a test event of {project}/{name} is under way; try again") from None
        wait_s = sub.endpoint.timeout_ms / 1000 + self.worker_wait_s
        try:
            async with asyncio.timeout(wait_s):
                return await self._answer(path, request)
        except TimeoutError:
            raise NotReady(
                f"no worker answered the test event of {project}/{name} within {wait_s:g} s: "
                "is a worker running and holding it? (its status names the worker)"
            ) from None
        finally:
            with contextlib.suppress(HttpbusError):
                await meta.delete(path)

    async def _answer(self, path: str, request: SampleRequest) -> SampleResult:
        async for node in self.catalog.store.watch(path):
            if node is None:
                raise NotReady("the test event's request was removed before it was answered")
            found = SampleNode.model_validate_json(node.data)
            if found.result is not None and found.request.id == request.id:
                return found.result
        raise NotReady("the metastore closed before the test event was answered")

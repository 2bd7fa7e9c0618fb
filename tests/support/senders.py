"""A recording :class:`~delivery_workers.sender.EndpointSender` for tests that need no socket:
it keeps every delivery it was given and answers as the test scripts it.

Example::

    sender = RecordingSender(lambda d: DeliveryResult(503, retry_after=1.0, error="HTTP 503"))
    async with sender:
        result = await sender.send(delivery)
    assert sender.attempts() == [1]
"""

from __future__ import annotations

from collections.abc import Callable

from core.lifecycle import AsyncResource
from core.model import Endpoint, Subscription
from core.result import DeliveryResult
from delivery_workers.sender import Delivery
from segments.protocol import Stored

Script = Callable[[Delivery], DeliveryResult]
OK = DeliveryResult(200)
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def delivery_to(
    url: str,
    timeout_ms: int = 2_000,
    *,
    value: bytes = b"{}",
    headers: tuple[tuple[str, bytes], ...] = (),
    name: str = "billing",
) -> Delivery:
    """One message of ``shop/orders`` (partition 0, position 1) for subscription ``name`` to
    ``url``, signed with :data:`SECRET`: what the sender tests send."""
    sub = Subscription(
        project="shop",
        name=name,
        topic_project="shop",
        topic="orders",
        endpoint=Endpoint(url=url, timeout_ms=timeout_ms),
        signing_secret=SECRET,
    )
    stored = Stored(partition=0, position=1, timestamp_ms=1, value=value, headers=headers)
    return Delivery(sub, "shop/orders", stored)


class RecordingSender(AsyncResource):
    """Answers each delivery with ``script(delivery)`` (default: 200), recording it first."""

    def __init__(self, script: Script | None = None) -> None:
        self.script: Script = script or (lambda _delivery: OK)
        self.deliveries: list[Delivery] = []
        self.started = False
        self.closed = False

    async def start(self) -> None:
        self.started = True

    async def aclose(self) -> None:
        self.closed = True

    async def send(self, delivery: Delivery) -> DeliveryResult:
        self.deliveries.append(delivery)
        return self.script(delivery)

    def attempts(self) -> list[int]:
        return [d.attempt for d in self.deliveries]

"""The test event (``POST …/subscriptions/{s}/test-event``): a signed request the worker that
holds a subscription sends to its endpoint on demand, so a receiver can check its signature
and its answer without waiting for real traffic (docs/receiving.md, "Send a test event").

The control plane and the worker are separate deployables: they meet at one metastore node
per subscription (``metastore.paths.test_event``), whose data is a :class:`SampleNode`. The
control plane creates it (ephemeral: it goes with the control plane's session) holding the
request; the worker holding the subscription sends the event through the sender every
delivery uses (the same request builder, signing, endpoint policy and answer limits) and
writes the result into the node; the control plane reads it and deletes the node.

Named ``sample`` in code (not ``test``): test runners collect ``Test*`` classes.
"""

from __future__ import annotations

import json

from pydantic import Field

from .model import Model

TEST_HEADER = "x-test"  # carried as X-Test: true on the test event's request
CONTENT_TYPE = "application/json"
EVENT_TYPE = "httpbus.test"
MAX_ANSWER_CHARS = 1_000  # of the endpoint's answer, shown to whoever asked


class SampleRequest(Model):
    id: str = Field(pattern=r"^[0-9a-f]{32}$", description="the test event's id (webhook-id)")
    at_ms: int = Field(description="when it was asked for (epoch milliseconds)")
    by: str = Field(max_length=500, description="the control plane that asked")


class SampleResult(Model):
    """What the endpoint answered to the test event."""

    message_id: str = Field(description="its X-Message-Id and webhook-id: test_<id>")
    delivered: bool = Field(description="a 2xx: the endpoint took it")
    status: int | None = Field(description="the endpoint's HTTP status; none if it never answered")
    latency_ms: float = Field(description="from sending the request to the end of the answer")
    error: str | None = Field(default=None, description="why it failed, as a delivery would say")
    answer: str | None = Field(
        default=None, description=f"the start of the endpoint's answer (at most {MAX_ANSWER_CHARS})"
    )
    worker: str = Field(description="the worker that sent it")


class SampleNode(Model):
    request: SampleRequest
    result: SampleResult | None = None


def sample_payload(request: SampleRequest, subscription: str, topic: str) -> bytes:
    """The test event's body: a small JSON object that says what it is."""
    body = {
        "type": EVENT_TYPE,
        "id": request.id,
        "subscription": subscription,
        "topic": topic,
        "requested_at_ms": request.at_ms,
        "note": "a test event sent on request (X-Test: true); no message of the topic",
    }
    return json.dumps(body, separators=(",", ":")).encode()

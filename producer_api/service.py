"""What one producer process holds while it runs."""

from __future__ import annotations

from dataclasses import dataclass

from .auth import Authorizer
from .metadata import TopicCache
from .metrics import ProducerMetrics
from .publish import Publisher


@dataclass(frozen=True, slots=True)
class RequestRules:
    """Limits of one produce request (producer settings ``max_header_bytes`` and
    ``body_timeout_s``)."""

    max_header_bytes: int = 32 * 1024
    body_timeout_s: float = 30.0


@dataclass
class Service:
    publisher: Publisher
    authorizer: Authorizer
    cache: TopicCache
    metrics: ProducerMetrics
    rules: RequestRules = RequestRules()

"""What one producer process holds while it runs."""

from __future__ import annotations

from dataclasses import dataclass

from .auth import Authorizer
from .metadata import TopicCache
from .metrics import ProducerMetrics
from .publish import Publisher


@dataclass
class Service:
    publisher: Publisher
    authorizer: Authorizer
    cache: TopicCache
    metrics: ProducerMetrics

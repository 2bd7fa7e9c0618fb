"""The delivery contract on the real ZooKeeper and Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.contract.delivery_contract import DeliveryContract
from tests.support.services import RealServices
from tests.support.world import World, kafka_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.kafka]


@pytest.fixture
async def world(real_services: RealServices, unique: str) -> AsyncIterator[World]:
    async with kafka_world(real_services, unique) as built:
        yield built


class TestKafkaDelivery(DeliveryContract):
    pass

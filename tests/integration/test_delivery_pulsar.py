"""The delivery contract on the real ZooKeeper and Pulsar."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.contract.delivery_contract import DeliveryContract
from tests.support.services import RealServices
from tests.support.world import World, pulsar_world

pytestmark = [pytest.mark.zookeeper, pytest.mark.pulsar]


@pytest.fixture
async def world(real_services: RealServices, unique: str) -> AsyncIterator[World]:
    async with pulsar_world(real_services, unique) as built:
        yield built


class TestPulsarDelivery(DeliveryContract):
    pass

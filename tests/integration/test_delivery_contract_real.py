"""The delivery contract on the real ZooKeeper with Kafka, and with Pulsar."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.contract.delivery_contract import DeliveryContract
from tests.support.services import RealServices
from tests.support.world import BACKENDS, World, real_world


@pytest.fixture(params=BACKENDS)
async def world(
    request: pytest.FixtureRequest, real_services: RealServices, unique: str
) -> AsyncIterator[World]:
    async with real_world(request.param, real_services, unique) as built:
        yield built


class TestDeliveryOnRealServers(DeliveryContract):
    pass

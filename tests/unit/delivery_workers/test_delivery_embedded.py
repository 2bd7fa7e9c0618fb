"""The delivery contract on the embedded metastore and store (SQLite files)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.contract.delivery_contract import DeliveryContract
from tests.support.world import World, embedded_world


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with embedded_world(tmp_path) as built:
        yield built


class TestEmbeddedDelivery(DeliveryContract):
    pass

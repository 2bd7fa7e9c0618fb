"""What a round of the assignment leader costs when nothing changed, and what it still
notices (control_plane.leaders.assigner): rounds are called directly, on the embedded
metastore, with two members joined."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from control_plane.leaders import assigner as assigner_module
from control_plane.leaders.assigner import WORKERS, Assigner
from core.errors import VersionConflict
from metastore import paths
from metastore.embedded import EmbeddedMetaStore
from metastore.protocol import Node
from tests.support.world import World, embedded_world, subscription


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    async with embedded_world(tmp_path) as built, AsyncExitStack() as stack:
        for member in ("m1", "m2"):
            meta = await stack.enter_async_context(EmbeddedMetaStore(str(tmp_path / "meta.db")))
            await meta.join(WORKERS, member, b"{}")
        for i in range(8):
            await built.catalog.create_subscription(subscription(f"s{i}"))
        yield built


@pytest.fixture
async def leader(world: World) -> Assigner:
    """The leader's assigner after its first round (called directly, no election)."""
    assigner = Assigner(world.meta, world.catalog, "cp-1")
    assert await assigner.rebalance() is not None
    return assigner


def count_list_reads(world: World, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The assignment lists the metastore is asked for, from now on."""
    asked: list[str] = []
    get = world.meta.get

    async def counting(path: str) -> Node | None:
        if path.startswith(paths.ASSIGNMENTS):
            asked.append(path)
        return await get(path)

    monkeypatch.setattr(world.meta, "get", counting)
    return asked


async def assigned(world: World) -> set[str]:
    found: set[str] = set()
    for member in ("m1", "m2"):
        node = await world.meta.get(paths.assignment(member))
        assert node is not None
        found |= set(json.loads(node.data))
    return found


async def test_a_round_that_changed_nothing_neither_plans_nor_reads_the_lists(
    world: World, leader: Assigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert await assigned(world) == {f"p/s{i}" for i in range(8)}
    asked = count_list_reads(world, monkeypatch)
    assert await leader.rebalance() is None
    assert asked == []

    await world.catalog.create_subscription(subscription("s8"))
    plan = await leader.rebalance()
    assert plan is not None and "p/s8" in {k for keys in plan.values() for k in keys}
    assert len(asked) == 1  # only the list that changed is read and written
    assert await assigned(world) == {f"p/s{i}" for i in range(9)}


async def test_a_list_changed_behind_the_leader_is_mended_at_the_next_check(
    world: World, leader: Assigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await world.meta.get(paths.assignment("m1"))
    assert node is not None
    await world.meta.update(paths.assignment("m1"), b"[]", expected_version=node.version)
    assert await leader.rebalance() is None  # trusted until the check is due
    monkeypatch.setattr(assigner_module, "VERIFY_S", 0.0)
    assert await leader.rebalance() is not None
    assert await assigned(world) == {f"p/s{i}" for i in range(8)}


async def test_a_subscription_made_again_with_shards_is_noticed_by_the_refresh(
    world: World, leader: Assigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    await world.catalog.delete_subscription("p", "s3")
    await world.catalog.create_subscription(subscription("s3", shards=2))
    monkeypatch.setattr(assigner_module, "SHARDS_TTL_S", 0.0)
    plan = await leader.rebalance()
    assert plan is not None
    units = {k for keys in plan.values() for k in keys}
    assert {"p/s3#0", "p/s3#1"} <= units and "p/s3" not in units


async def test_a_write_that_lost_a_race_is_tried_again_at_the_next_round(
    world: World, leader: Assigner, monkeypatch: pytest.MonkeyPatch
) -> None:
    update, refused = world.meta.update, []

    async def refusing_once(path: str, data: bytes, *, expected_version: int) -> Node:
        if not refused:
            refused.append(path)
            raise VersionConflict(f"{path}: another leader wrote it")
        return await update(path, data, expected_version=expected_version)

    monkeypatch.setattr(world.meta, "update", refusing_once)
    await world.catalog.create_subscription(subscription("s8"))
    assert await leader.rebalance() is not None and refused
    assert "p/s8" not in await assigned(world)
    assert await leader.rebalance() is not None  # nothing changed since, but not written
    assert await assigned(world) == {f"p/s{i}" for i in range(9)}
    assert await leader.rebalance() is None

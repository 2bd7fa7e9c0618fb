"""The assignment leader's kept plan (control_plane/leaders/rendezvous.py): always the plan
computed from nothing, and hashing only what changed (10^7 hashes a round at 10^5
subscriptions and 100 workers before)."""

from __future__ import annotations

import random

import pytest

from control_plane.leaders import rendezvous as module
from control_plane.leaders.rendezvous import Planner, rendezvous


@pytest.fixture
def hashes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Weights computed: one per call of ``weight``, one per worker seeded into ``_best``."""
    counted = [0]
    real, real_best = module.weight, module._best

    def counting(worker: str, key: str) -> int:
        counted[0] += 1
        return real(worker, key)

    def counting_best(key: str, seeded: module.Seeds) -> tuple[int, str]:
        counted[0] += len(seeded)
        return real_best(key, seeded)

    monkeypatch.setattr(module, "weight", counting)
    monkeypatch.setattr(module, "_best", counting_best)
    return counted


def _keys(n: int) -> list[str]:
    keys = [f"p{i % 7}/s{i}" for i in range(n)]
    return keys + [f"p0/sharded#{k}" for k in range(5)]


def test_the_kept_plan_is_the_plan_from_nothing_through_every_change() -> None:
    rng = random.Random(7)
    planner = Planner()
    keys = set(_keys(300))
    members = {f"w{i}" for i in range(8)}
    for _ in range(60):
        roll = rng.random()
        if roll < 0.3:
            members.discard(rng.choice(sorted(members)))
        elif roll < 0.6:
            members.add(f"w{rng.randrange(20)}")
        elif roll < 0.8:
            keys |= {f"p{rng.randrange(7)}/n{rng.randrange(10_000)}" for _ in range(10)}
        else:
            keys -= set(rng.sample(sorted(keys), 10))
        assert planner.plan(keys, members) == rendezvous(keys, members)


def test_a_round_without_change_hashes_nothing(hashes: list[int]) -> None:
    planner, keys, members = Planner(), _keys(1_000), [f"w{i}" for i in range(10)]
    planner.plan(keys, members)
    assert hashes[0] == 1_000 * 10 + 10  # one ranking for the five shards
    hashes[0] = 0
    planner.plan(keys, members)
    assert hashes[0] == 0


def test_a_join_hashes_each_unit_once_and_a_leave_only_what_it_held(hashes: list[int]) -> None:
    planner, keys = Planner(), _keys(1_000)
    members = [f"w{i}" for i in range(10)]
    planner.plan(keys, members)
    hashes[0] = 0
    planner.plan(keys, [*members, "w10"])
    assert hashes[0] == 1_000 + 11  # the new member per unit; the shards ranked again
    held = len(rendezvous(keys, [*members, "w10"])["w3"])
    hashes[0] = 0
    planner.plan(keys, [m for m in [*members, "w10"] if m != "w3"])
    assert hashes[0] <= held * 10 + 10


def test_a_unit_goes_to_the_worker_of_highest_weight() -> None:
    """The seeded hashing gives the digests of :func:`weight`: the owner is the worker of
    highest weight, ties to the larger name."""
    keys, members = _keys(500)[:500], [f"w{i}" for i in range(12)]
    plan = rendezvous(keys, members)
    for worker, owned in plan.items():
        for key in owned:
            assert max((module.weight(w, key), w) for w in members)[1] == worker

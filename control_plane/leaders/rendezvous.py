"""Rendezvous (highest-random-weight) hashing of units of assignment to workers, computed
once and then kept up to date.

A unit ``"project/subscription"`` goes to the worker of highest weight
``blake2b(worker, unit)`` (ties, which 64-bit weights make vanishingly rare, to the larger
name); shard k of a sharded subscription, ``"project/subscription#k"``, goes to the k-th
worker in the order of weight for the subscription's whole key (round robin), so its shards
spread over as many workers as there are. Every leader computes the same plan.

:func:`rendezvous` computes a plan from nothing: a hash per unit and worker, 10^7 of them for
100 000 subscriptions and 100 workers (2.1 s of CPU, each worker's hash state made once and
copied per unit; 6.2 s hashed one by one). :class:`Planner` keeps each whole unit's owner
and its weight and, when asked again, hashes only what changed (measured
in bench/scale.py, docs/capacity.md):

- a unit seen for the first time: one hash per worker;
- a worker that left: its units only, one hash per remaining worker each;
- a worker that joined: one hash per unit (it takes those it now weighs most for);
- nothing changed: no hash at all.

Shards are few and are ranked again whenever the members change.

>>> Planner().plan(["p/a", "p/b"], ["w1"])
{'w1': ['p/a', 'p/b']}
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from core.shards import parse_unit_key


def weight(worker: str, key: str) -> int:
    """The weight of ``worker`` for ``key``: what every leader must compute alike. The
    planner computes the same digests from :func:`seeds` (a test holds them equal)."""
    digest = hashlib.blake2b(f"{worker}\x00{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


Seeds = list[tuple[Any, str]]
"""Each worker with the hash state of its name and the separator: a copy of it fed the
unit's key is :func:`weight`'s digest, without hashing the worker's part again."""


def seeds(workers: Iterable[str]) -> Seeds:
    return [(hashlib.blake2b(f"{w}\x00".encode(), digest_size=8), w) for w in workers]


def _best(key: str, seeded: Seeds) -> tuple[int, str]:
    """``max((weight(w, key), w) for w in workers)``, 2.4 times cheaper: at 10^5 units and
    100 workers a plan from nothing is 10^7 weights (6.2 s of CPU computed one by one)."""
    data = key.encode()
    top, owner = b"", ""
    for state, worker in seeded:
        digest = state.copy()
        digest.update(data)
        found = digest.digest()  # big-endian, so bytes order as the weights do
        if found > top or (found == top and worker > owner):
            top, owner = found, worker
    return int.from_bytes(top, "big"), owner


def rendezvous(keys: Iterable[str], workers: Iterable[str]) -> dict[str, list[str]]:
    """Each key given to its worker, computed from nothing; every worker listed, keys sorted.

    >>> rendezvous(["p/a"], ["w1"])
    {'w1': ['p/a']}
    """
    return Planner().plan(keys, workers)


class Planner:
    """The plan of the last call, kept to compute the next one incrementally (see the
    module doc). Not safe for concurrent use; the assigner calls it from one task."""

    def __init__(self) -> None:
        self._members: frozenset[str] = frozenset()
        self._owners: dict[str, tuple[int, str]] = {}  # whole key -> (weight, worker)
        self._ranked: dict[str, list[str]] = {}  # "project/sub" of a shard -> workers
        self._seeds: Seeds = []  # of the members

    def plan(self, keys: Iterable[str], workers: Iterable[str]) -> dict[str, list[str]]:
        """Each key given to one of ``workers``; every worker listed, its keys sorted."""
        members = frozenset(workers)
        wanted = set(keys)
        if members != self._members:
            self._move(members)
        plan: dict[str, list[str]] = {w: [] for w in sorted(members)}
        if not members:
            return plan
        self._owners = {k: v for k, v in self._owners.items() if k in wanted}
        ranked, self._ranked = self._ranked, {}
        for key in sorted(wanted):
            plan[self._owner(key, members, ranked)].append(key)
        return plan

    def _move(self, members: frozenset[str]) -> None:
        """Bring the kept owners up to date with a new member set."""
        left, joined = self._members - members, members - self._members
        self._members = members
        self._ranked.clear()
        self._seeds = seeds(members)
        if not members:
            self._owners.clear()
            return
        newcomers = seeds(joined)
        for key, (held, owner) in self._owners.items():
            if owner in left:
                self._owners[key] = _best(key, self._seeds)
            elif joined:
                self._owners[key] = max((held, owner), _best(key, newcomers))

    def _owner(self, key: str, members: frozenset[str], ranked: dict[str, list[str]]) -> str:
        """The owner of ``key``; ``ranked``: the shard rankings of the last plan (those
        still used are kept)."""
        project, name, index = parse_unit_key(key)
        if index is None:
            found = self._owners.get(key)
            if found is None:
                found = self._owners[key] = _best(key, self._seeds)
            return found[1]
        whole = f"{project}/{name}"
        order = self._ranked.get(whole) or ranked.get(whole)
        if order is None:
            weighed = sorted(((weight(w, whole), w) for w in members), reverse=True)
            order = [w for _, w in weighed]
        self._ranked[whole] = order
        return order[index % len(order)]

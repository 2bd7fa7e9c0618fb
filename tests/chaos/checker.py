"""The chaos suite's one checker (issue 34): a run's history in, its verdict out.

A history is what the clients and the receivers recorded, nothing the system under test says
about itself:

- ``published``: per group, every message id a client tried to publish, in publish order (a
  refused publish is retried with the same id, so an id is listed once);
- ``acked``: the ids whose publish was answered 2xx;
- ``answers``: every publish answer, (time, status), 0 for no answer (a timeout, a reset);
- ``deliveries``: every 2xx delivery the receivers got, in arrival order, each with the
  sender that made it (a worker's name) and when it began and was answered.

The verdict names, per run: acknowledged but never delivered (loss), per-group order
inversions, a group delivered by two senders at overlapping times (split brain),
duplicates, the windows in which publishing answered 503 and how long each lasted, and the
time until publishing and delivery were back after the fault healed. Example::

    verdict = check(History(published, acked, answers, deliveries), heal_at=healed)
    print(verdict.summary())
    verdict.assert_sound(back_within_s=15)  # 0 loss, 0 inversions, 0 overlaps, back in 15 s

A delivery whose ``start`` is 0 is a stored record with no time (a test that reads the
storage instead of a receiver): it counts for loss, order and duplicates only.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from tests.support.hook import Request

UNAVAILABLE = 503


@dataclass(frozen=True)
class Delivery:
    id: str
    group: str
    sender: str  # who sent it: a worker's name ("" or "?": not known)
    start: float  # time.time() when the receiver got it (0: untimed, a stored record)
    end: float = 0.0  # when the receiver answered it (0 or below start: at once)

    @property
    def until(self) -> float:
        return max(self.start, self.end)


@dataclass(frozen=True)
class Overlap:
    """Two senders delivering one group at once: ``first`` was still unanswered when
    ``second`` began."""

    group: str
    first: Delivery
    second: Delivery

    def __str__(self) -> str:
        a, b = self.first, self.second
        return (
            f"{self.group}: {a.id} by {a.sender} [{a.start:.3f}, {a.until:.3f}] and "
            f"{b.id} by {b.sender} at {b.start:.3f}"
        )


@dataclass
class History:
    published: Mapping[str, list[str]]  # group → ids in publish order
    acked: set[str]
    answers: list[tuple[float, int]] = field(default_factory=list)  # (time, status; 0: none)
    deliveries: list[Delivery] = field(default_factory=list)  # 2xx only, in arrival order


@dataclass(frozen=True)
class Verdict:
    lost: list[str]  # acknowledged, never delivered
    inversions: dict[str, list[str]]  # group → ids in first-delivery order, when not in order
    overlaps: list[Overlap]
    duplicates: int  # deliveries beyond the first of each id
    unavailable: list[tuple[float, float]]  # 503 windows: first 503 → next 2xx (or last answer)
    refused: dict[int, int]  # publish answers other than 2xx, by status (0: no answer)
    publish_back_s: float | None  # longest time without a 2xx publish from the heal on
    delivery_back_s: float | None  # longest time without a delivery from the heal on
    acked: int
    delivered: int

    def summary(self) -> str:
        spans = sorted((b - a for a, b in self.unavailable), reverse=True)
        windows = ", ".join(f"{d:.2f}s" for d in spans[:3]) or "none"
        if len(spans) > 3:
            windows += f" (the longest 3 of {len(spans)})"
        back = (
            f"publishing back within {_s(self.publish_back_s)}, "
            f"delivery back within {_s(self.delivery_back_s)} of the heal"
        )
        return (
            f"{self.acked} acknowledged, {self.delivered} deliveries: {len(self.lost)} lost, "
            f"{len(self.inversions)} groups out of order, {len(self.overlaps)} overlapping "
            f"deliveries by two senders, {self.duplicates} duplicates; publishes refused "
            f"{self.refused}, 503 windows: {windows}; {back}"
        )

    def assert_sound(self, back_within_s: float | None = 15.0) -> None:
        """0 loss, 0 inversions, 0 overlaps; and, when measured, publishing and delivery
        back within ``back_within_s`` of the heal (None: recovery not asserted)."""
        assert not self.lost, f"{len(self.lost)} acknowledged, never delivered: {self.lost[:20]}"
        assert not self.inversions, f"order inverted: {dict(list(self.inversions.items())[:5])}"
        assert not self.overlaps, "a group delivered by two senders at once: " + "; ".join(
            str(o) for o in self.overlaps[:5]
        )
        if back_within_s is None:
            return
        for what, took in (("publishing", self.publish_back_s), ("delivery", self.delivery_back_s)):
            assert took is None or took < back_within_s, (
                f"{what} not back within {back_within_s:g} s of the heal ({took:.1f} s)"
            )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}s"


RUNS: list[tuple[str, Verdict]] = []
"""Every verdict of this process, by the test that asked for it: the table ``make chaos``
ends with (:func:`matrix`, printed by tests/conftest.py's terminal summary)."""


def check(history: History, heal_at: float | None = None) -> Verdict:
    """The verdict on ``history``; recovery is measured from ``heal_at`` when given."""
    verdict = _verdict(history, heal_at)
    test = os.environ.get("PYTEST_CURRENT_TEST", "?").split(" ")[0]
    if not test.startswith("tests/unit/"):  # the checker's own tests judge made-up runs
        RUNS.append((test.rsplit("/", 1)[-1], verdict))
    return verdict


def matrix(runs: Iterable[tuple[str, Verdict]]) -> list[str]:
    """One line per run: the fault (its test), what was acknowledged and delivered, loss,
    inversions, overlaps, duplicates, the longest 503 window and the recovery."""
    header = ("run", "acked", "delivered", "lost", "inv", "overlap", "dup", "503 max", "back")
    rows = [header]
    for test, v in runs:
        longest = max((b - a for a, b in v.unavailable), default=0.0)
        back = f"{_s(v.publish_back_s)} / {_s(v.delivery_back_s)}"
        counts = (v.acked, v.delivered, len(v.lost), len(v.inversions), len(v.overlaps))
        rows.append((test, *map(str, counts), str(v.duplicates), f"{longest:.2f}s", back))
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def _verdict(history: History, heal_at: float | None) -> Verdict:
    timed = [d for d in history.deliveries if d.start > 0]
    ok_times = [t for t, status in history.answers if 200 <= status < 300]
    return Verdict(
        lost=lost(history.acked, history.deliveries),
        inversions=inversions(history.published, history.deliveries),
        overlaps=overlaps(timed),
        duplicates=duplicates(history.deliveries),
        unavailable=unavailable_windows(history.answers),
        refused=dict(Counter(s for _, s in history.answers if not 200 <= s < 300)),
        publish_back_s=None if heal_at is None else longest_gap(ok_times, heal_at),
        delivery_back_s=(
            None if heal_at is None or not timed else longest_gap([d.start for d in timed], heal_at)
        ),
        acked=len(history.acked),
        delivered=len(history.deliveries),
    )


def from_requests(
    requests: Iterable[Request], sender: Callable[[Request], str] | None = None
) -> list[Delivery]:
    """The endpoint double's 2xx requests (``Hook.on(path)``) as deliveries: the sender is
    ``sender(request)``, by default the request's ``sender`` (``Hook.identify``'s answer)."""
    return [
        Delivery(
            r.id, r.headers.get("X-Group-Id", ""), sender(r) if sender else r.sender, r.at, r.done
        )
        for r in requests
        if 200 <= r.status < 300
    ]


def lost(acked: Iterable[str], deliveries: Iterable[Delivery]) -> list[str]:
    delivered = {d.id for d in deliveries}
    return sorted(set(acked) - delivered)


def inversions(
    published: Mapping[str, list[str]], deliveries: Iterable[Delivery]
) -> dict[str, list[str]]:
    """Per group, the ids in the order of their first delivery, for the groups where that
    order is not the publish order (ids never published are left out)."""
    rank = {mid: i for ids in published.values() for i, mid in enumerate(ids)}
    firsts: dict[str, list[str]] = {}
    seen: set[str] = set()
    for d in deliveries:
        if d.id not in seen and d.id in rank:
            seen.add(d.id)
            firsts.setdefault(d.group, []).append(d.id)
    return {
        g: ids
        for g, ids in firsts.items()
        if [rank[i] for i in ids] != sorted(rank[i] for i in ids)
    }


def overlaps(deliveries: Iterable[Delivery]) -> list[Overlap]:
    """Per group, each delivery that began while another sender's delivery of the same group
    was still unanswered."""
    found: list[Overlap] = []
    by_group: dict[str, list[Delivery]] = {}
    for d in deliveries:
        by_group.setdefault(d.group, []).append(d)
    for group, items in by_group.items():
        latest: dict[str, Delivery] = {}  # sender → its delivery answered last so far
        for d in sorted(items, key=lambda d: d.start):
            for sender, other in latest.items():
                if sender != d.sender and other.until > d.start:
                    found.append(Overlap(group, other, d))
            if d.sender not in latest or d.until > latest[d.sender].until:
                latest[d.sender] = d
    return found


def duplicates(deliveries: Iterable[Delivery]) -> int:
    return sum(n - 1 for n in Counter(d.id for d in deliveries).values())


def unavailable_windows(answers: Iterable[tuple[float, int]]) -> list[tuple[float, float]]:
    """The spans from a 503 answer to the next 2xx answer (of any client); a span still open
    at the end ends at the last answer."""
    windows: list[tuple[float, float]] = []
    opened: float | None = None
    last = 0.0
    for at, status in sorted(answers):
        last = at
        if status == UNAVAILABLE and opened is None:
            opened = at
        elif 200 <= status < 300 and opened is not None:
            windows.append((opened, at))
            opened = None
    if opened is not None:
        windows.append((opened, last))
    return windows


def longest_gap(times: Iterable[float], since: float) -> float:
    """The longest time without an event from ``since`` on, up to the last event (no event
    after ``since``: infinity, never back)."""
    after = sorted(t for t in times if t >= since)
    if not after:
        return float("inf")
    points = [since, *after]
    return max(b - a for a, b in zip(points, points[1:], strict=False))
